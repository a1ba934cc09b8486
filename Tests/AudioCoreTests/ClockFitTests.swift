import AudioCore
import Foundation
import Testing

/// ClockFit against clocks whose truth is known: a phone's clock 200 ppm fast and 17 s off, read over a network of
/// 8 ms whose queues add an exponential delay (mean 15 ms) to each way on its own, so that round trips run from 8 to
/// well over 100 ms and split unevenly between the ways.
@Suite struct ClockFitTests {
    /// The phone's clock at room time `t` (both in microseconds).
    static func phone(_ t: Double, ppm: Double = 200) -> Double { t * (1 + ppm * 1e-6) + 17_000_000 }

    /// One NTP-style reading at room time `t`: the room sends, the phone stamps on arrival, the room receives; the
    /// phone's stamp against the midpoint of the room's two, within half the round trip.
    static func reading(at t: Double, ppm: Double = 200, rng: inout SplitMix64) -> ClockFit.Reading {
        func queue() -> Double { -15_000 * log(Double.random(in: 1e-9...1, using: &rng)) }
        let out = 4_000 + queue(), back = 4_000 + queue()
        let roundTrip = out + back
        return ClockFit.Reading(x: phone(t + out, ppm: ppm), y: t + roundTrip / 2, error: roundTrip / 2)
    }

    /// Over five minutes of readings four a second (the stage's pace), the room time of any phone time is found
    /// within 2.5 ms from the 15th second on and within 1 ms from the first minute (a quarter and a tenth of what a
    /// phone voice may be placed off by: the best of each 5 s span has queued little either way, and the weighted
    /// line through them averages what is left; before three spans the rate is taken as 1, and then drawn toward 1
    /// by the prior while few spans say otherwise — 200 ppm is 0.2 ms a second), and the drift within 10 ppm at the
    /// end.
    @Test func followsADriftingClockOverFiveMinutes() {
        var rng = SplitMix64(seed: 7)
        var fit = ClockFit(bucketSpan: 5_000_000)
        var worst = 0.0, worstAfterAMinute = 0.0
        for quarter in 0..<1200 {
            let t = Double(quarter) * 250_000
            fit.add(Self.reading(at: t, rng: &rng))
            let second = quarter / 4
            if second >= 15, quarter % 4 == 0 {
                // Where the phone's audio stamped now and half a second ago belongs.
                for back in [0.0, 500_000] {
                    let truth = t - back
                    let found = fit.y(at: Self.phone(truth))!
                    worst = max(worst, abs(found - truth))
                    if second >= 60 { worstAfterAMinute = max(worstAfterAMinute, abs(found - truth)) }
                }
            }
        }
        #expect(worst < 2_500, "the worst error over five minutes: \(worst) µs")
        #expect(worstAfterAMinute < 1_000, "the worst error after the first minute: \(worstAfterAMinute) µs")
        // The phone's clock runs 200 ppm fast: the room's clock advances 1/1.0002 of it.
        #expect(abs(fit.driftPPM + 200) < 10, "\(fit.driftPPM) ppm")
        #expect(fit.readings == 1200 && (60...61).contains(fit.best.count), "\(fit.best.count) spans")
    }

    /// Before the readings span the rate's window, the offset is the best reading's and the rate 1: within the
    /// smallest round trip's half.
    @Test func oneReadingGivesTheOffset() {
        var fit = ClockFit(bucketSpan: 5_000_000)
        #expect(fit.isEmpty && fit.y(at: 0) == nil)
        fit.add(ClockFit.Reading(x: 1_000_000, y: 5_000_000, error: 30_000))
        fit.add(ClockFit.Reading(x: 1_500_000, y: 5_490_000, error: 2_000))
        #expect(fit.rate == 1)
        #expect(fit.y(at: 2_500_000) == 6_490_000, "from the reading with the smaller error")
    }

    /// Readings that are not numbers or have no error bound are ignored; a drift beyond the bound is clamped (a clock
    /// that runs 1 % fast is broken, not drifting).
    @Test func brokenReadingsAreIgnoredAndTheRateIsBounded() {
        var fit = ClockFit(bucketSpan: 1_000_000, maximumDrift: 0.001)
        fit.add(ClockFit.Reading(x: .nan, y: 0, error: 1))
        fit.add(ClockFit.Reading(x: 0, y: 0, error: -1))
        #expect(fit.isEmpty && fit.readings == 0)
        for s in 0..<20 {
            let x = Double(s) * 1_000_000
            fit.add(ClockFit.Reading(x: x, y: x * 1.01, error: 100))
        }
        #expect(abs(fit.rate - 1.001) < 1e-12, "clamped: \(fit.rate)")
    }

    /// The window moves on: after 10 minutes of a clock that changed its drift (a phone warming up: 50 ppm, then
    /// 150), the rate is the newer one's, as the older spans leave the window — within 5 ppm: the readings are exact,
    /// but their stated errors (4 … 20 ms over a 2-minute window) allow the slope about 17 ppm, and the prior draws
    /// it toward 0 by a small part of that.
    @Test func theWindowFollowsAChangeOfDrift() {
        var rng = SplitMix64(seed: 3)
        var fit = ClockFit(bucketSpan: 5_000_000, bucketCount: 24)
        // A continuous clock: the second stretch's drift from where the first ended.
        func phoneClock(_ t: Double) -> Double {
            t < 300_000_000 ? Self.phone(t, ppm: 50) : Self.phone(300_000_000, ppm: 50) + (t - 300_000_000) * (1 + 150e-6)
        }
        for second in 0..<600 {
            let t = Double(second) * 1_000_000
            // Symmetric round trips here (the phone stamps at the midpoint): what is tested is the window, not the
            // filter.
            let roundTrip = Double.random(in: 8_000...40_000, using: &rng)
            fit.add(ClockFit.Reading(x: phoneClock(t + roundTrip / 2), y: t + roundTrip / 2, error: roundTrip / 2))
        }
        #expect(abs(fit.driftPPM + 150) < 5, "exact readings: \(fit.driftPPM) ppm")
        #expect(fit.best.count == 24)
    }

    /// A phone over a jittery link with no drift at all (each way 10 … 50 ms, one reading in twenty held 200 … 400 ms
    /// more, as TCP holds what follows a lost segment), read four times a second into 2 s spans as a phone voice
    /// does: over the first 10 … 30 s the fit invents no drift of the noise (a plain least-squares line did: 700 ppm in
    /// the browser test, 7 ms a 10 s), and places the phone's time within 5 ms.
    @Test func aJitteryStartInventsNoDrift() {
        var rng = SplitMix64(seed: 11)
        var fit = ClockFit(bucketSpan: 2_000_000, bucketCount: 150)
        var worstDrift = 0.0, worst = 0.0
        for quarter in 0..<120 {
            let t = Double(quarter) * 250_000
            func way() -> Double {
                Double.random(in: 10_000...50_000, using: &rng) + (Double.random(in: 0..<1, using: &rng) < 0.05 ? Double.random(in: 200_000...400_000, using: &rng) : 0)
            }
            let out = way(), back = way()
            fit.add(ClockFit.Reading(x: Self.phone(t + out, ppm: 0), y: t + (out + back) / 2, error: (out + back) / 2))
            if quarter >= 40 {
                worstDrift = max(worstDrift, abs(fit.driftPPM))
                worst = max(worst, abs(fit.y(at: Self.phone(t, ppm: 0))! - t))
            }
        }
        #expect(worstDrift < 150, "the drift the fit found: up to \(worstDrift) ppm")
        #expect(worst < 5_000, "the phone's time placed up to \(worst) µs off")
    }

    /// With no prior (`expectedDrift: .infinity`) the line is the readings' own, whatever their errors' scale: a
    /// device's clock 50 ppm slow against the host's, read once a cycle with errors that only rank the readings (how
    /// late a cycle was, plus 10¹² µs), is followed to the ppm — a prior would weigh against such errors as bounds
    /// and hold the rate at 1.
    @Test func withoutAPriorErrorsOnlyRank() {
        var fit = ClockFit(bucketSpan: 2_000_000, bucketCount: 150, expectedDrift: .infinity)
        var rng = SplitMix64(seed: 5)
        for cycle in 0..<6_000 {
            let host = Double(cycle) * 10_000
            let late = Double.random(in: 0...500, using: &rng)
            fit.add(ClockFit.Reading(x: host + late, y: host * (1 - 50e-6), error: late + 1e12))
        }
        #expect(abs(fit.driftPPM + 50) < 1, "\(fit.driftPPM) ppm")
    }
}
