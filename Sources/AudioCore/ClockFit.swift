/// One clock read against another, followed over time: `y ≈ offset + rate × x`, fitted through the best readings.
///
/// Readings of a remote clock are never exact: a phone's clock read over the network is known only within the round
/// trip (NTP's rule: the remote time belongs to the midpoint of the local send and receive, within half the round
/// trip), a device cycle's host time only ever comes late. Each reading carries that uncertainty as its `error`
/// (smaller is better). The fit keeps, in each span of ``bucketSpan`` of `x`, the reading with the smallest error
/// (NTP's clock filter), and draws the least-squares line through those — each weighted by the inverse square of its
/// error — once they span ``minimumSpanForRate`` (its slope is the clocks' drift); before that the rate is 1 and the
/// offset is the best reading's. The slope is drawn toward 1 by a prior of ``expectedDrift`` (a ridge: the
/// least-squares line's slope as a Gaussian's mean whose spread is that drift): readings over a short span, or as
/// uneven as a jittery network's, would otherwise make a drift of their noise (a line through 10 s of readings good to
/// ±5 ms has a slope good only to ±1,000 ppm), which then carries the clock off as time passes. Readings that say
/// more — a longer span, smaller errors — outweigh it.
///
/// Value type, no locks: one owner feeds it and reads it.
public struct ClockFit: Sendable {
    /// One reading: at `x` on the one clock, `y` on the other, within `error` (same unit as `y`).
    public struct Reading: Sendable, Equatable {
        /// The time on the clock read against (the fit's input).
        public var x: Double
        /// The time on the other clock at `x` (the fit's output).
        public var y: Double
        /// How far `y` may be from the truth (≥ 0; smaller is better).
        public var error: Double
        /// A reading of `y` at `x`, within `error`.
        public init(x: Double, y: Double, error: Double) {
            self.x = x
            self.y = y
            self.error = error
        }
    }

    /// Readings are grouped in spans of this much `x`, and the best of each kept.
    public let bucketSpan: Double
    /// Spans kept (the oldest go): the window the rate is fitted over is `bucketSpan × bucketCount`.
    public let bucketCount: Int
    /// How much `x` the kept readings must cover before the rate is fitted (shorter, the rate is 1): by default two
    /// spans, three readings.
    public let minimumSpanForRate: Double
    /// The rate is kept within 1 ± this (a clock off by more is a broken reading, not drift).
    public let maximumDrift: Double
    /// How far from 1 the rate is expected to be (a standard deviation): the prior the fitted slope is drawn toward
    /// (`.infinity`: none). It weighs against the readings' errors, so they must be bounds in `y`'s unit.
    public let expectedDrift: Double

    /// The best reading of each span, oldest first.
    public private(set) var best: [Reading] = []
    /// Readings taken in all.
    public private(set) var readings = 0
    /// `y = offset + rate × (x − origin)`.
    public private(set) var rate = 1.0
    private var origin = 0.0, offset = 0.0

    /// A fit of `bucketSpan` spans (e.g. 5 s of a phone's clock in microseconds: 5_000_000), keeping `bucketCount`.
    /// `expectedDrift` (default 200 ppm, what a phone's crystal is off by at worst) is the spread of the prior on the
    /// drift; `.infinity` fits the plain line (for readings whose errors only rank them, not bound them).
    public init(
        bucketSpan: Double, bucketCount: Int = 120, minimumSpanForRate: Double? = nil, maximumDrift: Double = 0.001,
        expectedDrift: Double = 200e-6
    ) {
        precondition(bucketSpan > 0 && bucketCount >= 2 && expectedDrift > 0, "a span, at least two of them, and a drift to expect")
        self.expectedDrift = expectedDrift
        self.bucketSpan = bucketSpan
        self.bucketCount = bucketCount
        self.minimumSpanForRate = minimumSpanForRate ?? 2 * bucketSpan
        self.maximumDrift = maximumDrift
    }

    /// Whether any reading has been taken.
    public var isEmpty: Bool { best.isEmpty }
    /// The error of the best reading in the newest span (the round trip's half, for a remote clock).
    public var newestError: Double? { best.last?.error }
    /// The drift in parts per million (the rate's distance from 1).
    public var driftPPM: Double { (rate - 1) * 1e6 }

    /// Takes a reading; a reading older than the newest span by more than the window is ignored.
    public mutating func add(_ reading: Reading) {
        guard reading.x.isFinite, reading.y.isFinite, reading.error.isFinite, reading.error >= 0 else { return }
        readings += 1
        let bucket = (reading.x / bucketSpan).rounded(.down)
        if let i = best.lastIndex(where: { ($0.x / bucketSpan).rounded(.down) == bucket }) {
            if reading.error < best[i].error { best[i] = reading } else { return }
        } else if let last = best.last, bucket < (last.x / bucketSpan).rounded(.down) {
            // An older span than the newest: kept only if its span is still in the window and has no reading yet.
            guard (last.x / bucketSpan).rounded(.down) - bucket < Double(bucketCount) else { return }
            best.append(reading)
            best.sort { $0.x < $1.x }
        } else {
            best.append(reading)
        }
        if best.count > bucketCount { best.removeFirst(best.count - bucketCount) }
        fit()
    }

    /// `y` at `x`, nil before the first reading.
    public func y(at x: Double) -> Double? {
        best.isEmpty ? nil : offset + rate * (x - origin)
    }

    private mutating func fit() {
        guard let newest = best.last else { return }
        let span = newest.x - best[0].x
        if best.count >= 3, span >= minimumSpanForRate {
            // Weighted least squares: a reading counts by the inverse of its variance (a span whose best round trip
            // was short counts for more) — a reading anywhere within its bound, e²/3 — never more than a floor's
            // worth.
            let floor = max(1e-9, (best.map(\.error).min() ?? 0) * 0.5)
            func weight(_ r: Reading) -> Double { 1 / (r.error * r.error / 3 + floor * floor) }
            let total = best.reduce(0) { $0 + weight($1) }
            let mx = best.reduce(0) { $0 + weight($1) * $1.x } / total, my = best.reduce(0) { $0 + weight($1) * $1.y } / total
            var sxy = 0.0, sxx = 0.0
            for r in best {
                let w = weight(r)
                sxy += w * (r.x - mx) * (r.y - my)
                sxx += w * (r.x - mx) * (r.x - mx)
            }
            // The slope that minimises the weighted squares plus (slope − 1)² / expectedDrift²: the readings' slope
            // where they say much (sxx large against the prior's weight), 1 where they say little.
            let prior = expectedDrift.isFinite ? 1 / (expectedDrift * expectedDrift) : 0
            rate = sxx + prior > 0 ? min(max((sxy + prior) / (sxx + prior), 1 - maximumDrift), 1 + maximumDrift) : 1
            // Through the mean of the kept readings: every reading counts for the offset, not only the newest.
            origin = mx
            offset = my
        } else {
            rate = 1
            // The best reading of all so far: the offset is the one with the least error.
            let b = best.min { $0.error < $1.error } ?? newest
            origin = b.x
            offset = b.y
        }
    }
}
