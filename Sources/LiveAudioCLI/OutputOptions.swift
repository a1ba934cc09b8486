import ArgumentParser
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LiveAudio
import Logging

/// Where encoded audio goes — RTMP servers and FLV, M4A or ADTS files — and how: the options `stream` and `karaoke`
/// share.
struct EncodedOutputOptions: ParsableArguments {
    @Option(help: "AAC bit rate, e.g. 128k.")
    var bitrate: String = "128k"

    @Option(name: .customLong("to"), help: "An rtmp:// or rtmps:// URL, or a .flv/.m4a/.mp4/.aac file. Repeat for more outputs.")
    var outputs: [String] = []

    @Option(name: .customLong("to-file"), help: "A file of destinations, one per line (# starts a comment): keeps stream keys out of the command line. Repeatable.")
    var outputFiles: [String] = []

    @Option(name: .customLong("to-env"), help: "The name of an environment variable holding a destination (e.g. LIVEAUDIO_RTMP_URL). Repeatable.")
    var outputVariables: [String] = []

    @Option(name: .customLong("queue"), help: "RTMP send queue, milliseconds of audio.")
    var queueMilliseconds: Int = 2000

    @Option(name: .customLong("ca-file"), help: "rtmps: a PEM file of certificates to trust besides the system's.")
    var caFile: String?

    /// Every destination given by --to, --to-file and --to-env, in that order.
    func parsedOutputs() throws(AudioError) -> [LiveStreamSession.Output] {
        var parsed = try outputs.map { text throws(AudioError) in try LiveStreamSession.Output(parsing: text) }
        for path in outputFiles {
            parsed += try LiveStreamSession.Output.parsingLines(of: path)
            warnIfOthersCanRead(path)
        }
        for name in outputVariables {
            guard let text = ProcessInfo.processInfo.environment[name], !text.isEmpty else {
                throw AudioError(.invalidParameter, "--to-env \(name): the environment variable \(name) is not set or empty")
            }
            do throws(AudioError) {
                parsed.append(try LiveStreamSession.Output(parsing: text.trimmingWhitespace()))
            } catch {
                throw AudioError(error.code, "--to-env \(name): \(error.message)")
            }
        }
        return parsed
    }

    func parsedBitRate() throws(AudioError) -> Int { try FileEncoding.parseBitRate(bitrate) }

    /// The RTMP outputs' settings: queue, trusted certificates, and a logger at `level`.
    func rtmpConfiguration(logLevel level: Logger.Level) throws(AudioError) -> RTMPPublisher.Configuration {
        var rtmp = RTMPPublisher.Configuration()
        guard (100...600_000).contains(queueMilliseconds) else {
            throw AudioError(.invalidParameter, "--queue must be 100 to 600000 milliseconds, got \(queueMilliseconds)")
        }
        rtmp.queueMilliseconds = Int64(queueMilliseconds)
        rtmp.logger = Logger(label: "liveaudio.rtmp")
        rtmp.logger.logLevel = level
        if let caFile {
            guard FileManager.default.isReadableFile(atPath: caFile) else {
                throw AudioError(.fileIO, "cannot read --ca-file '\(caFile)'")
            }
            rtmp.trustCertificates(inPEMFile: caFile)
        }
        return rtmp
    }
}

/// A destinations file holds stream keys: say so when other users may read it.
private func warnIfOthersCanRead(_ path: String) {
    var st = stat()
    if stat(path, &st) == 0, st.st_mode & (S_IRGRP | S_IROTH) != 0 {
        note("warning: '\(path)' holds stream keys and other users can read it (chmod 600 '\(path)')")
    }
}
