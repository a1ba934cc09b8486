import ArgumentParser
import AudioCore
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LiveAudio

struct Encode: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Encode any audio file to AAC-LC (.aac ADTS, .flv, .m4a) or to WAV.",
        discussion: """
            IN is anything FFmpeg decodes (WAV, MP3, AAC, M4A, FLAC, Ogg, FLV). The output's kind follows its \
            extension. AAC output keeps the input's rate unless --sample-rate asks for another; the rate must be \
            one AAC can carry. Ctrl-C or SIGTERM stops early and still finishes the file, so it plays up to there; \
            ADTS and FLV stay playable even if the process is killed outright. If the input turns out to be \
            damaged, the output is deleted.
            """)

    @Argument(help: "The file to encode.")
    var input: String

    @Option(name: .shortAndLong, help: "The file to write: .aac, .flv, .m4a (or .mp4), .wav.")
    var output: String

    @Option(help: "AAC bit rate for all channels: 128k, 96000, … (default 64k per channel).")
    var bitrate: String?

    @Option(help: "Channels to write (default: the input's). Mono is copied to every channel.")
    var channels: Int?

    @Option(name: .customLong("sample-rate"), help: "Rate to write, resampling when the input's differs.")
    var sampleRate: Int?

    @Option(help: "AAC profile: aac-lc (the only one supported; others are refused).")
    var profile: String = AACProfile.lc.rawValue

    @Option(name: .customLong("sample-format"), help: "WAV samples: s16, s24, s32 or f32.")
    var sampleFormat: String = "s16"

    @OptionGroup var loudness: NormalizeOptions

    func run() throws {
        let stop = StopFlag()
        let signals = StopSignals { stop.set() }
        defer { withExtendedLifetime(signals) {} }
        do throws(AudioError) {
            let summary = try FileEncoding(
                input: input, output: output, bitrate: bitrate, channels: channels, sampleRate: sampleRate,
                profile: profile, sampleFormat: sampleFormat,
                normalize: try loudness.target(), truePeakCeiling: loudness.truePeak
            ).run(stop: stop)
            print(summary)
        } catch {
            throw fail(error)
        }
    }
}

/// `liveaudio encode`, apart from argument parsing: everything is checked before the output is created, and an
/// output that fails half-way is deleted.
struct FileEncoding {
    enum Output {
        case aac(AACContainer)
        case wav
    }

    let input: String
    let output: String
    let bitrate: String?
    let channels: Int?
    let sampleRate: Int?
    let profile: String
    let sampleFormat: String
    /// The loudness target of `--normalize`, LUFS.
    var normalize: Double? = nil
    var truePeakCeiling = -1.0

    /// `--profile`: aac-lc (another AAC profile is refused with why).
    func parsedProfile() throws(AudioError) -> AACProfile {
        do throws(AudioError) { return try AACProfile(parsing: profile) } catch {
            throw AudioError(error.code, "--profile: " + error.message)
        }
    }

    static func parseBitRate(_ text: String) throws(AudioError) -> Int {
        let t = text.lowercased()
        let scale = t.hasSuffix("k") ? 1000.0 : 1.0
        guard let value = Double(t.hasSuffix("k") ? String(t.dropLast()) : t), value.isFinite, value > 0 else {
            throw AudioError(.invalidParameter, "--bitrate must be bits per second like 128k or 96000, got '\(text)'")
        }
        return Int((value * scale).rounded())
    }

    /// Reads `reader` to the end (or until `stop` is set) in 4096-frame chunks, giving each to `write`; returns the
    /// frames read and whether it was stopped early.
    /// On a terminal, how far it is on a progress line (standard error).
    func pump(
        _ reader: any AudioFileReader, stop: StopFlag, _ normalizer: LoudnessNormalizer? = nil,
        _ write: (BufferView) throws(AudioError) -> Void
    ) throws(AudioError) -> (Int64, Bool) {
        let chunk = PCMBuffer(channelCount: reader.channelCount, capacity: 4096)
        var frames: Int64 = 0
        let line = ProgressLine("encoding", total: reader.frameCount > 0 ? reader.duration : nil)
        defer { line.clear() }
        while !stop.isSet {
            let got = try reader.read(into: chunk.view(frames: chunk.capacity))
            if got == 0 { break }
            if let normalizer {
                let out = try normalizer.process(chunk.view(frames: got))
                if out.frameCount > 0 { try write(out) }
            } else {
                try write(chunk.view(frames: got))
            }
            frames += Int64(got)
            line.update(done: Double(frames) / reader.sampleRate)
        }
        if let normalizer {
            let tail = try normalizer.finish()
            if tail.frameCount > 0 { try write(tail) }
        }
        line.update(done: Double(frames) / reader.sampleRate, force: true)
        return (frames, stop.isSet)
    }

    func run(stop: StopFlag) throws(AudioError) -> String {
        let kind: Output
        if output.lowercased().hasSuffix(".wav") {
            kind = .wav
        } else if let container = AACContainer(path: output) {
            kind = .aac(container)
        } else {
            throw AudioError(.unsupportedFile, "cannot tell what to write from '\(output)': name it .aac, .flv, .m4a, .mp4 or .wav")
        }
        if let channels, !(1...8).contains(channels) {
            throw AudioError(.invalidFormat, "--channels must be 1 to 8, got \(channels)")
        }
        guard input != output else { throw AudioError(.invalidParameter, "the output would overwrite the input") }
        try Preflight.checkFolder(forWriting: output)
        // What can be checked without the input, before it is measured (a long decode) or anything is written.
        switch kind {
        case .wav:
            guard ["s16", "s24", "s32", "f32"].contains(sampleFormat.lowercased()) else {
                throw AudioError(.invalidFormat, "--sample-format must be s16, s24, s32 or f32, got '\(sampleFormat)'")
            }
            if bitrate != nil { throw AudioError(.invalidParameter, "--bitrate is for AAC; WAV is uncompressed") }
        case .aac:
            _ = try parsedProfile()
            _ = try bitrate.map(Self.parseBitRate)
        }
        let started = Date()
        var reader = try AudioFile.open(path: input, sampleRate: sampleRate.map(Double.init), channelCount: channels)
        if case .aac = kind {
            if !AACEncoderSettings.sampleRates.contains(reader.sampleRate), sampleRate == nil {
                throw AudioError(
                    .unsupportedSampleRate,
                    "'\(input)' is at \(formatHz(reader.sampleRate)), which AAC cannot carry; add --sample-rate with one of "
                        + AACEncoderSettings.sampleRates.map { "\(Int($0))" }.joined(separator: ", "))
            }
            // The encoder's own checks (profile, bit rate for the rate and channels, rate), before any measuring.
            try AACEncoderSettings(
                sampleRate: reader.sampleRate, channelCount: reader.channelCount, bitRate: try bitrate.map(Self.parseBitRate),
                profile: try parsedProfile()
            ).validate()
        }
        let reopen = { () throws(AudioError) -> any AudioFileReader & Sendable in
            try AudioFile.open(path: input, sampleRate: sampleRate.map(Double.init), channelCount: channels)
        }
        var plan: LoudnessNormalization?
        if let normalize {
            // Measured as it will be written (rate, channels), then read again from the start.
            let measured = try measure(reader, stop: stop)
            plan = try LoudnessNormalization(target: normalize, ceiling: truePeakCeiling, measured: measured)
                .compensatingLimiter(open: reopen, stopped: { stop.isSet })
            reader = try reopen()
        }
        func normalizer(_ plan: LoudnessNormalization?) throws(AudioError) -> LoudnessNormalizer? {
            guard let plan, !plan.isSilent else { return nil }
            return try LoudnessNormalizer(plan, sampleRate: reader.sampleRate, channelCount: reader.channelCount, maximumFrames: 4096)
        }
        var frames: Int64 = 0
        var interrupted = false
        switch kind {
        case .aac(let container):
            let profileValue = try parsedProfile()
            let settings = AACEncoderSettings(
                sampleRate: reader.sampleRate, channelCount: reader.channelCount,
                bitRate: try bitrate.map(Self.parseBitRate), profile: profileValue)
            var encoder = try AACEncoder(settings: settings)
            var writer = try AACFileWriter(path: output, container: container, encoder: encoder)
            // AAC changes what it encodes: its band limit takes off some loudness, its reconstruction can overshoot
            // the limiter's ceiling. The file is decoded and measured, and while it misses the target by more than
            // 0.1 LU or its true peak is over the ceiling by more than 0.1 dB, encoded again with the gain and the
            // limiter corrected by as much (three times at most).
            var attempt = 0
            while true {
                do throws(AudioError) {
                    (frames, interrupted) = try pump(reader, stop: stop, try normalizer(plan)) { view throws(AudioError) in
                        try writer.write(try encoder.encode(view))
                    }
                    try writer.write(try encoder.flush())
                    try writer.finish(inputFrames: encoder.inputFrames)
                } catch {
                    writer.discard()
                    throw error
                }
                guard let current = plan, !current.isSilent, !interrupted, attempt < 3 else { break }
                // Stopped while the file is checked: the complete file written so far stays, said to be stopped
                // early. Any other failure from here deletes the output, as a failure half-way does.
                do throws(AudioError) {
                    let reached = try FileLoudness.measure(path: output, stopped: { stop.isSet }).reading
                    let over = reached.truePeak - current.ceiling
                    let short = current.target - reached.integrated
                    guard over > 0.1 || (reached.integrated.isFinite && abs(short) > 0.1) else { break }
                    attempt += 1
                    var next = abs(short) > 0.1 && reached.integrated.isFinite ? current.compensatingCodec(loss: short) : current
                    if over > 0.1 { next = next.lowerLimiter(by: over + 0.1) }
                    let corrected = try next.compensatingLimiter(open: reopen, stopped: { stop.isSet })
                    reader = try reopen()
                    if stop.isSet {
                        interrupted = true
                        break
                    }
                    unlink(output)
                    plan = corrected
                    encoder = try AACEncoder(settings: settings)
                    writer = try AACFileWriter(path: output, container: container, encoder: encoder)
                } catch where stop.isSet {
                    interrupted = true
                    break
                } catch {
                    unlink(output)
                    throw error
                }
            }
            let normalized = plan.map(NormalizeOption.describe) ?? ""
            let elapsed = Date().timeIntervalSince(started)
            let seconds = Double(frames) / settings.sampleRate
            return (interrupted ? "stopped early; " : "")
                + "wrote \(output): AAC-LC \(formatHz(settings.sampleRate)), \(settings.channelCount) ch, "
                + "\(settings.bitRate / 1000)k, \(writer.packetsWritten) packets, "
                + String(cFormat: "%.3f s", seconds) + " (priming \(encoder.priming), padding \(encoder.padding ?? 0)), "
                + String(cFormat: "%.0fx real time", elapsed > 0 ? seconds / elapsed : 0) + normalized
        case .wav:
            let type: SampleType
            switch sampleFormat.lowercased() {
            case "s16": type = .int16
            case "s24": type = .int24
            case "s32": type = .int32
            case "f32": type = .float32
            default: throw AudioError(.invalidFormat, "--sample-format must be s16, s24, s32 or f32, got '\(sampleFormat)'")
            }
            if bitrate != nil { throw AudioError(.invalidParameter, "--bitrate is for AAC; WAV is uncompressed") }
            let format = try StreamFormat(
                sampleRate: reader.sampleRate, channelCount: reader.channelCount, sampleType: type, interleaved: true)
            let writer = try WAVFileWriter(path: output, format: format)
            do throws(AudioError) {
                var sinceCommit = 0
                (frames, interrupted) = try pump(reader, stop: stop, try normalizer(plan)) { view throws(AudioError) in
                    try writer.write(view)
                    sinceCommit += view.frameCount
                    if Double(sinceCommit) >= reader.sampleRate {
                        // Sizes in the header every second: a killed run leaves a WAV that plays up to here.
                        try writer.commitHeader()
                        sinceCommit = 0
                    }
                }
                try writer.finish()
            } catch {
                writer.abandon()
                unlink(output)
                throw error
            }
            let elapsed = Date().timeIntervalSince(started)
            let seconds = Double(frames) / reader.sampleRate
            let normalized = plan.map(NormalizeOption.describe) ?? ""
            return (interrupted ? "stopped early; " : "")
                + "wrote \(output): WAV \(format), \(frames) frames, " + String(cFormat: "%.3f s", seconds) + ", "
                + String(cFormat: "%.0fx real time", elapsed > 0 ? seconds / elapsed : 0) + normalized
        }
    }

    /// Reads `reader` to its end through a loudness meter (a progress line on a terminal).
    func measure(_ reader: any AudioFileReader, stop: StopFlag) throws(AudioError) -> LoudnessReading {
        guard (1...8).contains(reader.channelCount) else {
            throw AudioError(.invalidFormat, "--normalize measures 1 … 8 channels, '\(input)' has \(reader.channelCount)")
        }
        var kernel = LoudnessKernel(sampleRate: reader.sampleRate, channelCount: reader.channelCount)
        let chunk = PCMBuffer(channelCount: reader.channelCount, capacity: 4096)
        var frames: Int64 = 0
        let line = ProgressLine("measuring", total: reader.frameCount > 0 ? reader.duration : nil)
        defer { line.clear() }
        while true {
            if stop.isSet { throw AudioError(.invalidState, "stopped while measuring the loudness; nothing was written") }
            let got = try reader.read(into: chunk.view(frames: chunk.capacity))
            if got == 0 { break }
            kernel.process(chunk.view(frames: got))
            frames += Int64(got)
            line.update(done: Double(frames) / reader.sampleRate)
        }
        return kernel.reading
    }
}

struct Probe: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print what an audio file holds: codec, rate, channels, packets, timestamps, duration, priming, loudness.",
        discussion: """
            Works on anything FFmpeg reads; FLV and ADTS files are also checked tag by tag and frame by frame. \
            Timestamps are the first and last packets' presentation times; a negative first time, or a priming \
            figure, is encoder delay the container tells decoders to trim.
            """)

    @Argument(help: "The file to inspect.")
    var file: String

    @Flag(name: .customLong("no-loudness"), help: "Leave out the loudness line (it decodes the whole file).")
    var noLoudness = false

    func run() throws {
        do throws(AudioError) {
            let p = try AudioFileProbe.probe(path: file)
            let d = p.description
            let codec = d.codec + (d.profile.map { " (\($0))" } ?? "")
            print("\(file): \(codec) in \(d.container)")
            print("rate: \(formatHz(d.sampleRate)), channels: \(d.channelCount)")
            if d.bitRate > 0 { print("bit rate: \(d.bitRate / 1000) kbit/s") }
            print("packets: \(p.packetCount)")
            print(String(cFormat: "first timestamp: %.6f s, last timestamp: %.6f s", p.firstTimestamp, p.lastTimestamp))
            print(String(cFormat: "duration: %.6f s", p.duration))
            print("priming: " + (p.priming.map { "\($0) samples" } ?? "not signalled by the container"))
            // The whole file decoded once more, through the loudness meter; a file it cannot measure says why.
            if !noLoudness {
                do throws(AudioError) {
                    let m = try FileLoudness.measure(path: file)
                    print(
                        "loudness: \(formatLevel(m.reading.integrated, "LUFS")) integrated" + (m.isSilent ? " (silent)" : "")
                            + ", true peak \(formatLevel(m.reading.truePeak, "dBTP"))")
                } catch {
                    print("loudness: not measured (\(error.message))")
                }
            }
        } catch {
            throw fail(error)
        }
    }
}
