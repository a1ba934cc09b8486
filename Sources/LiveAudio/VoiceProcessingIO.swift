import AudioCore
import AudioDevices
import AudioUnits

/// Voice processing for the I/O unit: LiveAudio's counterpart of iOS's VoiceProcessingIO.
extension IOUnit {
    /// iOS's VoiceProcessingIO: a ``/AudioUnits/VoiceProcessingUnit`` on the capture bus (echo cancellation, noise
    /// suppression, gain control), referenced to what the output bus plays unless `reference` says otherwise.
    /// Everything that consumes the capture — the capture handler, the output graph's input unit — then gets the
    /// processed microphone, ``/AudioDevices/IOUnit/captureProcessingLatency`` later (at 48 kHz: 24 ms, and the
    /// device's period and 5 ms for the unit's worker thread). The unit's parameters can be changed while running;
    /// its read-outs (`echoReturnLossEnhancement`, `estimatedDelay`) say how it is doing.
    ///
    /// The reference is the output bus in one or two channels (a stereo output is summed to mono inside the unit).
    /// Unlike iOS, other audio is never ducked.
    ///
    /// Call it while the I/O unit is stopped (before ``/AudioDevices/IOUnit/start()``).
    /// - Parameter reference: what the unit's echo canceller is referenced to (default: what the output bus plays).
    /// - Returns: the unit now on the capture bus, for its parameters and read-outs.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidBus` when capture is disabled, `.unsupportedSampleRate` when bus 1
    ///   runs at a rate other than 8, 16, 32 or 48 kHz, `.invalidFormat` for a capture of more than two channels,
    ///   `.invalidState` while running.
    @discardableResult
    public func enableVoiceProcessing(reference: CaptureReference = .outputBus) throws(AudioError) -> VoiceProcessingUnit {
        guard let capture = configuration.inputFormat else {
            throw AudioError(.invalidBus, "voice processing works on the capture: bus 1 (input) is disabled; give the configuration an inputFormat")
        }
        guard VoiceProcessingUnit.sampleRates.contains(capture.sampleRate) else {
            throw AudioError(
                .unsupportedSampleRate,
                "voice processing runs at 8000, 16000, 32000 or 48000 Hz, not \(formatHz(capture.sampleRate)): open "
                    + "the I/O unit at one of those (a device at another rate is converted)")
        }
        let played = configuration.outputFormat?.channelCount ?? 1
        let unit = try VoiceProcessingUnit(
            format: try StreamFormat.graph(sampleRate: capture.sampleRate, channelCount: capture.channelCount),
            referenceChannelCount: min(max(played, 1), 2))
        try setCaptureProcessor(unit, reference: reference)
        return unit
    }
}
