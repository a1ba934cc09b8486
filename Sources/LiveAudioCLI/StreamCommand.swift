import ArgumentParser
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LiveAudio
import LiveAudioStage
import Logging

struct Stream: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Live stream: input → graph → AAC → RTMP servers and files, all at once.",
        discussion: """
            The input is a capture device, or an audio file (any format FFmpeg reads) paced in real time. With \
            --graph, it enters the graph's "input" node (see Examples/graphs/voice-chain.json). Each --to is an rtmp:// or \
            rtmps:// URL (rtmp://host[:port]/app/stream-key; the key is never printed) or a .flv, .m4a, .mp4 or .aac \
            file. RTMP outputs reconnect by themselves; their queue drops the oldest audio when the network falls \
            behind. Statistics print once a second. Ctrl-C stops and finishes every output.

            Stream keys: a --to on the command line can be read by every local user (/proc/PID/cmdline) and stays \
            in shell history. Pass keyed URLs with --to-file PATH (one destination per line, # comments; keep the \
            file mode 600) or --to-env NAME (the URL in environment variable NAME) instead.
            """)

    @Option(help: "A device (PipeWire source, ALSA PCM, JACK client, or for --backend virtual a WAV file) or, without --backend, an audio file.")
    var input: String?

    @Option(help: "pipewire, alsa, jack or virtual. Without it, an --input that is a file is streamed as a file, anything else is a device of the default backend (PipeWire where a server answers, ALSA otherwise).")
    var backend: String?

    @Option(help: "A graph file with one node of type \"input\".")
    var graph: String?

    @OptionGroup var destinations: EncodedOutputOptions

    @Option(help: "Seconds of input to stream (default: until Ctrl-C, or the end of a file input).")
    var duration: Double?

    @Flag(inversion: .prefixedNo, help: "Pace a file input in real time (--no-realtime: as fast as the encoder goes).")
    var realtime = true

    @Option(help: "Sample rate without --graph, Hz.")
    var rate: Double = 48_000

    @Option(help: "Encoded channels without --graph.")
    var channels: Int = 2

    @Option(name: .customLong("input-channels"), help: "Channels taken from the input without --graph (default: 1 from a device, --channels from a file).")
    var inputChannels: Int?

    @Option(help: "Frames per device period.")
    var period: Int = 1024

    @Option(help: "Periods in the device buffer (ALSA).")
    var periods: Int = 3

    @Option(name: .customLong("jack-server"), help: "The JACK server's name.")
    var jackServer: String?

    @Option(
        name: .customLong("reconnect-timeout"),
        help: "Seconds to keep reopening an input device that went away before giving up with an error.")
    var reconnectTimeout: Double = 30

    @Flag(help: "Print nothing but errors and the final summary.")
    var quiet = false

    @OptionGroup var stage: StageOptions

    @Flag(help: "Also print the RTMP connections' debug notes on standard error: each way a server departs from the spec and how it was taken (stream keys stay hidden).")
    var verbose = false

    func run() async throws {
        // Log lines go to standard error, below the statistics; each logger sets its own level.
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .trace
            return handler
        }
        do throws(AudioError) {
            try validateDuration(duration)
            let configuration = try makeConfiguration()
            let stageConfiguration = try stage.configuration()
            let session = try LiveStreamSession(configuration)
            let stop = StopFlag()
            // A signal stops the session at once, a start in progress too (a server that does not answer is not
            // waited for); the loop below then finds the flag and collects the summary.
            let signals = StopSignals {
                stop.set()
                Task { _ = await session.stop() }
            }
            let events = session.deviceEvents.map { printEvents($0) }
            do throws(AudioError) {
                try await session.start()
            } catch where stop.isSet {
                events?.cancel()
                withExtendedLifetime(signals) {}
                note("stopped before the stream started: nothing was sent or written")
                return
            }
            if let grant = session.deviceGrant { note("device: \(grant)") }
            let monitor = SnapshotMonitor { session.snapshot() }
            defer { monitor.stop() }
            var stageServer: StageServer<StreamStagePresenter>?
            if let stageConfiguration {
                do throws(AudioError) {
                    let presenter = StreamStagePresenter(session: session, title: "\(configuration.input)")
                    stageServer = try await StageServer.start(stageConfiguration, presenter: presenter, monitor: monitor)
                    note("the stage is at \(stageServer!.url)")
                } catch {
                    _ = await session.stop()
                    throw error
                }
            }
            note("streaming \(configuration.input) → \(configuration.outputs.map(\.description).joined(separator: ", "))")
            let limit = duration.map { Int64(($0 * session.sampleRate).rounded()) }
            // A bound on the clock too: a device that went away delivers no input seconds to count.
            let bound = ClockBound(
                duration: duration, grace: 3 + Double(configuration.periodFrames * configuration.periodCount) / session.sampleRate)
            var lastPrint = monotonicNanoseconds()
            // On a terminal, a progress line below the statistics: against --duration, or a file input's length.
            var length = duration
            if length == nil, case .file(let path, _) = configuration.input {
                length = try? AudioFile.open(path: path).duration
            }
            let line = ProgressLine("streaming", total: length, enabled: !quiet && isatty(STDERR_FILENO) == 1)
            while !stop.isSet, !session.hasEnded, !bound.hasPassed, !session.isStopRequested {
                let stats = session.statistics
                if let limit, Int64(stats.seconds * session.sampleRate) >= limit { break }
                if monotonicNanoseconds() - lastPrint >= 1_000_000_000 {
                    lastPrint = monotonicNanoseconds()
                    // Written straight to the descriptor, so a pipe sees each line as it happens.
                    if !quiet { line.printAbove("\(stats)") }
                }
                line.update(done: stats.seconds)
                try? await Task.sleep(nanoseconds: 10_000_000)
            }
            line.clear()
            monitor.refresh()
            if let stageServer {
                await stageServer.stop()
                note("the stage served \(stageServer.pagesServed) pages; \(stageServer.droppedSlowClients) were disconnected for not reading")
            }
            let summary = await session.stop()
            events?.cancel()
            withExtendedLifetime(signals) {}
            // The loudness first: "streamed …" stays the last line, which scripts read.
            print("loudness: \(summary.statistics.loudness.summaryText)")
            print("streamed \(summary.statistics)")
            if let error = summary.error { throw error }
            if let limit, bound.hasPassed, !stop.isSet, Int64(summary.statistics.seconds * session.sampleRate) < limit {
                throw AudioError(
                    .deviceUnavailable,
                    "the input was away when the \(String(cFormat: "%g", duration ?? 0)) s were up on the clock: "
                        + String(cFormat: "%.3f", summary.statistics.seconds) + " s were streamed")
            }
            for output in summary.statistics.outputs {
                if let r = output.rtmp, r.state == .failed {
                    throw r.lastError ?? AudioError(.connectionLost, "\(output.output) failed")
                }
            }
        } catch {
            throw fail(error)
        }
    }

    func makeConfiguration() throws(AudioError) -> LiveStreamSession.Configuration {
        let parsedOutputs = try destinations.parsedOutputs()
        guard !parsedOutputs.isEmpty else {
            throw AudioError(
                .invalidParameter,
                "give at least one --to (or --to-file, --to-env): an rtmp:// URL or a .flv, .m4a or .aac file")
        }
        let input: LiveStreamSession.Input
        if let backend {
            guard let b = DeviceBackend(rawValue: backend) else {
                throw AudioError(.invalidFormat, "--backend must be pipewire, alsa, jack or virtual, got '\(backend)'")
            }
            input = .device(name: self.input, backend: b)
        } else if let path = self.input, FileManager.default.fileExists(atPath: path) {
            input = .file(path: path, realTime: realtime)
        } else {
            input = .device(name: self.input, backend: DeviceBackend.standard)
        }
        var configuration = LiveStreamSession.Configuration(input: input, outputs: parsedOutputs)
        configuration.graphPath = graph
        configuration.sampleRate = rate
        configuration.channelCount = channels
        configuration.inputChannels = inputChannels
        configuration.bitRate = try destinations.parsedBitRate()
        configuration.periodFrames = period
        configuration.periodCount = periods
        configuration.jackServer = jackServer
        configuration.deviceReconnectTimeout = try validReconnectTimeout(reconnectTimeout)
        configuration.rtmp = try destinations.rtmpConfiguration(logLevel: verbose ? .debug : quiet ? .error : .warning)
        return configuration
    }
}
