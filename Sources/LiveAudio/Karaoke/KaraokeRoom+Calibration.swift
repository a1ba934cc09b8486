import AudioCore
import AudioDevices
import AudioUnits

extension KaraokeRoom {
    /// Calibrations played at most before the session goes on with what it has (and warns).
    static let maximumCalibrations = 3
    /// Seconds within which the clicks of a calibration must agree (2 ms).
    static let calibrationAgreement = 0.002
    /// Plays the calibration clicks on the running device and waits for them to come back: the median round trip.
    /// The echo canceller is off meanwhile (it would take the clicks out of the microphone). A calibration that saw
    /// an xrun, lost a click or whose clicks disagree by more than ``calibrationAgreement`` is played again, up to
    /// ``maximumCalibrations`` times; then the median of the last is used and a warning says so.
    func calibrate(_ clicks: CalibrationClicks, _ grant: DeviceGrant) async throws(AudioError) -> Int {
        // Half a second for the streams to settle, then a click every half second at least (four device buffers, so
        // an echo of one is not taken for the next).
        let interval = max(Int(sampleRate / 2), 4 * Int(Double(grant.periodFrames * max(1, grant.periodCount)) * sampleRate / grant.sampleRate), 512)
        let cancelling = voiceProcessingUnit.map { $0.echoCancellation.value } ?? 0
        try? voiceProcessingUnit?.echoCancellation.set(0)
        // The voice out of the headphones meanwhile: through a loop each click would come back again and again, and
        // a late copy of one click would be taken for the next (the search goes by shape, not level).
        try? monitor.setVolume(0, bus: 1)
        defer {
            try? voiceProcessingUnit?.echoCancellation.set(cancelling)
            volumes.withLock { apply($0) }
        }
        // A calibration with an xrun in it, or whose clicks disagree, is played again: a sound server may settle on
        // another latency when a stream restarts (PulseAudio at small periods: an underrun while the monitor source
        // wakes up, and the loop is 600 frames longer after it), and a median over both regimes is neither.
        let agreement = Int((sampleRate * Self.calibrationAgreement).rounded())
        // The best attempt so far if none is clean: steady first, then the most clicks, then the smallest spread.
        var best: (steady: Bool, found: [Int])?
        var xrunsSeen = false
        state.withLock { $0.calibrations = 0 }
        for attempt in 1...Self.maximumCalibrations {
            let xruns = io.xrunCount
            clicks.arm(at: timeline.sampleTime + Int64(sampleRate / 2), interval: interval)
            let deadline = monotonicNanoseconds() + 30_000_000_000
            while !clicks.isComplete {
                if let failure = io.failure { throw failure }
                try lifecycle.checkStarting()
                guard monotonicNanoseconds() < deadline else {
                    throw AudioError(.deviceUnavailable, "the device stalled during the calibration: \(timeline.sampleTime) frames in 30 s")
                }
                try? await Task.sleep(nanoseconds: 10_000_000)
            }
            state.withLock { $0.calibrations = attempt }
            let found = clicks.roundTrips().sorted()
            let steady = io.xrunCount == xruns
            xrunsSeen = xrunsSeen || !steady
            if steady, found.count == CalibrationClicks.clicks, found.last! - found.first! <= agreement {
                return found[found.count / 2]
            }
            func better(_ a: (steady: Bool, found: [Int]), than b: (steady: Bool, found: [Int])) -> Bool {
                if a.steady != b.steady { return a.steady }
                if a.found.count != b.found.count { return a.found.count > b.found.count }
                return (a.found.last ?? 0) - (a.found.first ?? 0) < (b.found.last ?? 0) - (b.found.first ?? 0)
            }
            if best == nil || better((steady, found), than: best!) { best = (steady, found) }
            // Nothing came back on a steady device: no loop, and playing again will not make one.
            if found.isEmpty, steady, best!.found.isEmpty { break }
        }
        guard let best, !best.found.isEmpty else {
            throw AudioError(
                .deviceUnavailable,
                "none of the \(CalibrationClicks.clicks) calibration clicks came back within \(interval) frames"
                    + (xrunsSeen ? " (the device had xruns meanwhile)" : "") + ": the output does not reach "
                    + "the input (connect them: a JACK loopback, a PulseAudio monitor source, or a cable), or give --latency-ms")
        }
        io.report(
            warning: "the calibration clicks came back \(best.found.map(String.init).joined(separator: ", ")) frames late "
                + "in the best of \(Self.maximumCalibrations) tries (xruns, lost clicks or clicks more than "
                + "\(Int(Self.calibrationAgreement * 1000)) ms apart): the device's latency did not hold still, and the voice may be "
                + "off by their spread; their median is used (give --latency-ms to set it)")
        return best.found[best.found.count / 2]
    }

}
