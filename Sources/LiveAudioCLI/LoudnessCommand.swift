import ArgumentParser
import FoundationEssentials
import LiveAudio

struct Loudness: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure files' loudness (EBU R128): integrated loudness, loudness range, true peak, sample peak.",
        discussion: """
            FILE is anything FFmpeg decodes. Loudness is ITU-R BS.1770-4's, all channels together: integrated \
            (gated, LUFS), loudness range (EBU Tech 3342, LU), true peak (oversampled 4x below 96 kHz, dBTP) and \
            sample peak (dBFS). A file with nothing above −70 LUFS has no integrated loudness: it prints -inf. More \
            than two channels are weighted as BS.1770 asks for the standard layout of their count (the surround \
            channels +1.5 dB, the LFE not counted), and the output says so. A file that cannot be read is reported \
            and the others are still measured; the exit status is 1 if any failed.
            """)

    @Argument(help: "The files to measure.")
    var files: [String]

    @Flag(help: "Print a JSON array, an object a file (silent files: \"integrated\": null).")
    var json = false

    func run() throws {
        var failed = false
        var objects: [String] = []
        for file in files {
            do throws(AudioError) {
                let m = try FileLoudness.measure(path: file)
                if json {
                    objects.append(Self.jsonObject(m))
                } else {
                    print(Self.text(m))
                }
            } catch {
                failed = true
                if json {
                    objects.append("{\"file\": \(file.jsonLiteral), \"error\": \(error.message.jsonLiteral), \"code\": \"\(String(describing: error.code).filter { $0 != "'" })\"}")
                } else {
                    StandardStream.error("liveaudio: error: \(error.message) [\(error.code)]\n")
                }
            }
        }
        if json { print("[\n  " + objects.joined(separator: ",\n  ") + "\n]") }
        if failed { throw ExitCode(1) }
    }

    static func text(_ m: FileLoudness) -> String {
        let r = m.reading
        var lines = [
            "\(m.path): " + (m.isSilent
                ? "integrated -inf LUFS (silent: no 400 ms block reaches -70 LUFS)"
                : "integrated \(formatLevel(r.integrated, "LUFS")), range " + String(cFormat: "%.1f LU", r.loudnessRange)),
            "  true peak \(formatLevel(r.truePeak, "dBTP")), sample peak \(formatLevel(r.samplePeak, "dBFS")), "
                + String(cFormat: "%.3f s", r.duration) + ", \(formatHz(m.sampleRate)), \(m.channelWeights.layout)",
        ]
        if m.channelCount > 2 { lines.append("  channels: " + m.channelWeights.description) }
        return lines.joined(separator: "\n")
    }

    static func jsonObject(_ m: FileLoudness) -> String {
        let r = m.reading
        func number(_ v: Double) -> String { v.isFinite ? String(cFormat: "%.2f", v) : "null" }
        return "{\"file\": \(m.path.jsonLiteral), \"integrated\": \(number(r.integrated)), \"loudnessRange\": \(number(r.loudnessRange)), "
            + "\"truePeak\": \(number(r.truePeak)), \"samplePeak\": \(number(r.samplePeak)), "
            + "\"duration\": \(String(cFormat: "%.3f", r.duration)), \"sampleRate\": \(Int(m.sampleRate)), "
            + "\"channels\": \(m.channelCount), \"weighting\": \(m.channelWeights.description.jsonLiteral)}"
    }
}

/// `--normalize[=LUFS]`: an option whose value may be left out. ArgumentParser wants a value for an option, so a
/// bare `--normalize` is rewritten to `--normalize=default` before parsing, and each command reads "default" as its
/// own target (−14 LUFS for files, −18 LUFS for a karaoke accompaniment).
/// `--normalize[=LUFS]` and `--true-peak` as `encode` and `render` take them (`karaoke` has its own: another default,
/// and the true peak is the session's).
struct NormalizeOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Normalize to this integrated loudness (default -14 LUFS): measure, then a gain; a true-peak limiter holds the peaks if the gain would push them over --true-peak.",
            valueName: "=LUFS"))
    var normalize: String?

    @Option(name: .customLong("true-peak"), parsing: .unconditional, help: "The true-peak ceiling for --normalize, dBTP.")
    var truePeak: Double = -1

    /// The target in LUFS, or nil without `--normalize`.
    /// - Throws: ``AudioError`` `.invalidParameter` for a value that is not a number of LUFS, or out of range.
    func target() throws(AudioError) -> Double? {
        try NormalizeOption.target(normalize, default: -14, ceiling: truePeak)
    }
}

enum NormalizeOption {
    /// A loudness given apart (`--normalize -16`) is taken as the option's value: a negative number would otherwise
    /// read as an option.
    static func rewrite(_ arguments: [String]) -> [String] {
        var out: [String] = []
        var i = 0
        while i < arguments.count {
            let a = arguments[i]
            // After "--", everything is an argument.
            if a == "--" { return out + arguments[i...] }
            if a == "--normalize" {
                // Only a loudness: a negative number or 0, "LUFS" after it or not ("-16", "-16LUFS", "-16 LUFS").
                let next = i + 1 < arguments.count ? arguments[i + 1] : ""
                let bare = next.lowercased().filter { $0 != " " }
                let number = bare.hasSuffix("lufs") ? String(bare.dropLast(4)) : bare
                if let value = Double(number), value.isFinite, value <= 0, number.hasPrefix("-") || number.hasPrefix("0") {
                    out.append("--normalize=" + next)
                    i += 2
                    continue
                }
                out.append("--normalize=default")
            } else {
                out.append(a)
            }
            i += 1
        }
        return out
    }

    /// The target in LUFS, or nil without the option.
    /// - Throws: ``AudioError`` `.invalidParameter` for a value that is not a number of LUFS, or out of range.
    static func target(_ value: String?, default fallback: Double, ceiling: Double) throws(AudioError) -> Double? {
        guard let value else { return nil }
        let bare = value.lowercased().filter { $0 != " " }
        let text = bare.hasSuffix("lufs") ? String(bare.dropLast(4)) : bare
        guard let target = text == "default" ? fallback : Double(text) else {
            throw AudioError(.invalidParameter, "--normalize takes a loudness in LUFS like --normalize=-16, got '\(value)'")
        }
        try LoudnessNormalization.check(target: target, ceiling: ceiling)
        return target
    }

    /// How a karaoke accompaniment was normalised, for a note.
    static func describe(_ n: KaraokeSession.AccompanimentNormalization) -> String {
        guard n.measured.isFinite else {
            return "--normalize changed nothing: the song is silent (no integrated loudness: nothing reaches -70 LUFS)"
        }
        return "the accompaniment measures \(formatLevel(n.measured, "LUFS"))" + (n.cached ? " (from the cache)" : "")
            + ", played at \(formatLevel(n.measured + n.gain, "LUFS")): gain " + String(cFormat: "%+.1f dB", n.gain)
            + (n.limitedByMixer ? " (held short of \(formatLevel(n.target, "LUFS")): +12 dB is the most a volume gives)"
                : n.limitedByTruePeak ? " (held short of \(formatLevel(n.target, "LUFS")) by its true peak, \(formatLevel(n.truePeak, "dBTP")))" : "")
    }

    /// What a normalisation did, for the command's summary line.
    static func describe(_ plan: LoudnessNormalization) -> String {
        if plan.isSilent {
            return "; --normalize changed nothing: the input is silent (no integrated loudness: nothing reaches -70 LUFS)"
        }
        var s = "; normalized to \(formatLevel(plan.target, "LUFS")): measured \(formatLevel(plan.measured.integrated, "LUFS")), gain "
            + String(cFormat: "%+.1f dB", plan.gain)
            + (abs(plan.codecLoss) >= 0.05 ? String(cFormat: " (%+.1f LU for what AAC takes)", plan.codecLoss) : "")
        if plan.needsLimiter {
            s += ", a true-peak limiter held the peaks at \(formatLevel(plan.limiterCeiling, "dBTP")) (the gain alone: "
                + "\(formatLevel(plan.truePeakAfterGain - plan.limiterLoss, "dBTP"))"
                + (plan.limiterLoss > 0 ? String(cFormat: "; the gain makes up the %.1f LU it took", plan.limiterLoss) : "")
                + (plan.limiterCeiling < plan.ceiling ? "; aimed under \(formatLevel(plan.ceiling, "dBTP")) by AAC's own overshoot" : "")
                + ")"
        } else {
            s += ", true peak \(formatLevel(plan.truePeakAfterGain, "dBTP"))"
        }
        return s
    }
}
