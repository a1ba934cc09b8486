import ArgumentParser
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LiveAudio
import Synchronization

/// Options every device command shares.
struct DeviceOptions: ParsableArguments {
    @Option(help: "The sound system: pipewire, alsa, jack or virtual (WAV files as devices); default: pipewire where a PipeWire server answers, alsa otherwise.")
    var backend: String?

    @Option(help: "Frames per period: the block the audio thread handles each cycle (default: 256 for monitor, 1024 for the others).")
    var period: Int?

    @Option(help: "Periods in the device buffer, ALSA (default: 2 for monitor, 3 for the others).")
    var periods: Int?

    @Option(name: .customLong("jack-server"), help: "The JACK server's name (default: $JACK_DEFAULT_SERVER or 'default').")
    var jackServer: String?

    @Option(help: "Virtual devices: realtime (one period per period of time) or fast (as fast as possible).")
    var pace: String = "realtime"

    @Option(
        name: .customLong("callback-sizes"),
        help: "Virtual devices: fixed, a list of frame counts (e.g. 128,441,1000), or random:MIN-MAX[:SEED].")
    var callbackSizes: String = "fixed"

    @Flag(inversion: .prefixedNo, help: "Reopen the device when it or its sound server goes away.")
    var reconnect: Bool = true

    @Option(
        help: """
            Capture and playback on one clock or two: auto (two when --input and --output are on different ALSA \
            sound cards), one, or two (playback paces, the capture is resampled to follow the drift; for a sound \
            server that drives two cards without bridging them).
            """)
    var clocks: String = "auto"

    @Option(
        name: .customLong("reconnect-timeout"),
        help: "Seconds to keep reopening a device that went away before giving up with an error.")
    var reconnectTimeout: Double = 30

    func parsedBackend() throws(AudioError) -> DeviceBackend {
        guard let backend else { return DeviceBackend.standard }
        guard let b = DeviceBackend(rawValue: backend) else {
            throw AudioError(.invalidFormat, "--backend must be pipewire, alsa, jack or virtual, got '\(backend)'")
        }
        return b
    }

    func virtualOptions() throws(AudioError) -> VirtualDeviceOptions {
        guard let pacing: VirtualDeviceOptions.Pacing = ["realtime": .realTime, "fast": .asFastAsPossible][pace] else {
            throw AudioError(.invalidFormat, "--pace must be realtime or fast, got '\(pace)'")
        }
        let sizes: VirtualDeviceOptions.CallbackSizes
        if callbackSizes == "fixed" {
            sizes = .fixed
        } else if callbackSizes.hasPrefix("random:") {
            let parts = callbackSizes.dropFirst(7).split(separator: ":")
            let bounds = parts.first?.split(separator: "-").compactMap { Int($0) } ?? []
            guard bounds.count == 2, bounds[0] >= 1, bounds[0] <= bounds[1] else {
                throw AudioError(.invalidFormat, "--callback-sizes random:MIN-MAX[:SEED], got '\(callbackSizes)'")
            }
            let seed = parts.count > 1 ? UInt64(parts[1]) ?? 1 : 1
            sizes = .random(range: bounds[0]...bounds[1], seed: seed)
        } else {
            let list = callbackSizes.split(separator: ",").map { Int($0.trimmingWhitespace()) }
            guard !list.isEmpty, list.allSatisfy({ $0 != nil }) else {
                throw AudioError(.invalidFormat, "--callback-sizes: fixed, N,N,…, or random:MIN-MAX[:SEED], got '\(callbackSizes)'")
            }
            sizes = .sequence(list.map { $0! })
        }
        return VirtualDeviceOptions(pacing: pacing, callbackSizes: sizes)
    }

    /// Buffering for recording and playback, where a few tens of milliseconds do not matter and robustness does.
    static let defaultBuffering = (period: 1024, periods: 3)
    /// Buffering for ear monitoring: the singer hears themself within a few milliseconds. 256 × 2 at 48 kHz is
    /// 10.7 ms of device buffering; a JACK server uses its own period whatever is asked.
    static let monitorBuffering = (period: 256, periods: 2)
    /// What `monitor` tries, lowest latency first, moving up when xruns repeat.
    static let monitorLadder: [(period: Int, periods: Int)] = [(256, 2), (256, 3), (256, 4), (512, 2), (512, 3), (1024, 3)]
    /// Xruns within ``monitorXrunWindowSeconds`` that move `monitor` to the next rung: one alone (a busy moment)
    /// does not.
    static let monitorXrunsToMove = 2
    static let monitorXrunWindowSeconds = 10.0

    func configuration(
        input: StreamFormat?, output: StreamFormat?, inputDevice: String?, outputDevice: String?,
        buffering: (period: Int, periods: Int) = defaultBuffering
    ) throws(AudioError) -> IOUnit.Configuration {
        var c = IOUnit.Configuration(
            backend: try parsedBackend(), inputFormat: input, outputFormat: output, inputDevice: inputDevice,
            outputDevice: outputDevice, periodFrames: period ?? buffering.period, periodCount: periods ?? buffering.periods,
            reconnect: reconnect,
            jackServer: jackServer, virtual: try virtualOptions())
        c.reconnectTimeout = try validReconnectTimeout(reconnectTimeout)
        guard let clocks = DeviceClocks(rawValue: clocks) else {
            throw AudioError(.invalidParameter, "--clocks must be auto, one or two, got '\(clocks)'")
        }
        c.clocks = clocks
        return c
    }
}

func validReconnectTimeout(_ seconds: Double) throws(AudioError) -> Double {
    guard seconds > 0, seconds <= 86_400 else {
        throw AudioError(.invalidParameter, "--reconnect-timeout must be more than 0 and at most 86400 seconds, got \(seconds)")
    }
    return seconds
}

/// `--duration` bounds a run on the clock as well as in frames: whatever the device does (it went away, it is
/// being reopened), the run ends by `duration` plus `grace` seconds for the device's start-up and buffering.
struct ClockBound {
    private let deadline: UInt64?

    init(duration: Double?, grace: Double) {
        let start = monotonicNanoseconds()
        deadline = duration.map { start + UInt64(($0 + grace) * 1e9) }
    }

    var hasPassed: Bool { deadline.map { monotonicNanoseconds() >= $0 } ?? false }

    /// The grace a device run gets: a sound server may take a few seconds to deliver a new stream's first period.
    static func deviceGrace(_ grant: DeviceGrant) -> Double {
        3 + Double(grant.periodFrames * max(1, grant.periodCount)) / grant.sampleRate
    }
}

/// Writes a line to standard error.
func note(_ message: String) {
    StandardStream.error("liveaudio: \(message)\n")
}

/// Prints device events to standard error as they come, until the stream ends or the task is cancelled.
/// `onStopped` runs when the device stops for good (a fault with reconnect off, or stop()).
func printEvents(_ events: AsyncStream<DeviceEvent>, onStopped: @escaping @Sendable () -> Void = {}) -> Task<Void, Never> {
    Task.detached {
        for await event in events {
            if case .started = event { continue }  // the command prints the grant itself
            if case .stopped = event {
                onStopped()
                continue
            }
            note(event.description)
        }
    }
}

/// Runs `body` when SIGINT, SIGTERM or SIGHUP (the terminal closed) arrives, instead of dying, so recordings are
/// finished properly. A signal already ignored (SIGHUP under `nohup`) stays ignored.
final class StopSignals: @unchecked Sendable {
    // Unchecked Sendable: `sources` filled in init and cancelled in deinit, never touched between; the handlers run on Dispatch
    private var sources: [DispatchSourceSignal] = []

    init(_ body: @escaping @Sendable () -> Void) {
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            let previous = signal(sig, SIG_IGN)
            if let previous, unsafeBitCast(previous, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self) { continue }
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler(handler: body)
            source.resume()
            sources.append(source)
        }
    }

    deinit { sources.forEach { $0.cancel() } }
}

func validateDuration(_ duration: Double?) throws(AudioError) {
    if let duration, !(duration.isFinite && duration > 0 && duration <= 86_400) {
        throw AudioError(.invalidFormat, "--duration must be between 0 and 86400 seconds, got \(duration)")
    }
}

struct Devices: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the audio devices: name, direction, default.",
        discussion: "Without --backend, lists PipeWire's sinks and sources when a PipeWire server answers, ALSA devices, and, when a JACK server is running, JACK clients.")

    @Option(help: "pipewire, alsa or jack.")
    var backend: String?

    @Option(name: .customLong("jack-server"), help: "The JACK server's name.")
    var jackServer: String?

    func run() throws {
        do throws(AudioError) {
            let backends: [DeviceBackend]
            if let backend {
                guard let b = DeviceBackend(rawValue: backend), b != .virtual else {
                    throw AudioError(.invalidFormat, "--backend must be pipewire, alsa or jack, got '\(backend)'")
                }
                backends = [b]
            } else {
                backends = [.pipewire, .alsa, .jack]
            }
            for b in backends {
                let devices: [AudioDeviceInfo]
                do throws(AudioError) {
                    devices = try AudioDevices.list(b, jackServer: jackServer)
                } catch {
                    if backend == nil {
                        print("\(b): \(error.message)")
                        continue
                    }
                    throw error
                }
                print("\(b): \(devices.count) device\(devices.count == 1 ? "" : "s")")
                let width = max(8, devices.map(\.name.count).max() ?? 0)
                for d in devices {
                    let name = d.name.padded(to: width)
                    let direction = d.directions.description.padded(to: 12)
                    print("  \(name)  \(direction)  \(d.isDefault ? "default" : "       ")  \(d.description)")
                }
            }
        } catch {
            throw fail(error)
        }
    }
}

struct Record: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Record from an input device into a WAV file.",
        discussion: """
            The WAV header is brought up to date every half second, so the file is valid up to the last moment \
            even if the recording is cut off. When the device or its sound server goes away, the recording waits \
            for it (with --reconnect, the default) and fills the time it was away with silence, so the file stays \
            aligned to the clock. If it has not come back within --reconnect-timeout seconds (default 30), or by \
            the time --duration is up on the clock, the recording ends with an error and the file holds what was \
            recorded before. Ctrl-C ends the recording cleanly.
            """)

    @Option(name: .shortAndLong, help: "The WAV file to write.")
    var output: String

    @Option(help: "The input device (PipeWire source node name, ALSA PCM, JACK client, or for --backend virtual the WAV file to read; default: the default source).")
    var device: String?

    @OptionGroup var options: DeviceOptions

    @Option(help: "Seconds to record (default: until Ctrl-C; a virtual input: its length).")
    var duration: Double?

    @Option(help: "Sample rate, Hz.")
    var rate: Double = 48_000

    @Option(help: "Channels.")
    var channels: Int = 1

    @Option(name: .customLong("sample-format"), help: "WAV samples: s16, s32 or f32.")
    var sampleFormat: String = "f32"

    func run() async throws {
        do throws(AudioError) {
            try validateDuration(duration)
            guard let sampleType: SampleType = ["s16": .int16, "s32": .int32, "f32": .float32][sampleFormat] else {
                throw AudioError(.invalidFormat, "--sample-format must be s16, s32 or f32, got '\(sampleFormat)'")
            }
            let backend = try options.parsedBackend()
            var limit = duration.map { Int64(($0 * rate).rounded()) }
            if backend == .virtual, limit == nil, let device {
                let info = try WAVFileReader.info(path: device)
                limit = info.frameCount
            }
            let mic = try MicrophoneSource(
                io: IOUnit(
                    options.configuration(
                        input: StreamFormat(sampleRate: rate, channelCount: channels, sampleType: .float32, interleaved: false),
                        output: nil, inputDevice: device, outputDevice: nil)))
            let writer = try WAVFileWriter(
                path: output,
                format: StreamFormat(sampleRate: rate, channelCount: channels, sampleType: sampleType, interleaved: true))
            // With reconnect off, a fault stops the device for good: end the stream, or the loop would wait forever.
            let events = printEvents(mic.events) { mic.finish() }
            let interrupted = StopFlag()
            let signals = StopSignals {
                interrupted.set()
                mic.finish()
            }
            let grant: DeviceGrant
            do throws(AudioError) {
                grant = try mic.start()
            } catch {
                writer.abandon()
                unlink(output)
                throw error
            }
            note("recording: \(grant)")
            // The clock bound: with the device gone and being reopened, no buffers arrive to end the loop.
            let bound = ClockBound(duration: duration, grace: ClockBound.deviceGrace(grant))
            let watchdog = Task {
                while !bound.hasPassed, !Task.isCancelled { try? await Task.sleep(nanoseconds: 50_000_000) }
                if !Task.isCancelled { mic.finish() }
            }
            defer { watchdog.cancel() }
            let silence = PCMBuffer(channelCount: channels, capacity: 4096)
            silence.view(frames: 4096).clear()
            var expected: Int64?
            var gapFrames: Int64 = 0
            var lastCommit = writer.framesWritten
            var failure: AudioError?
            for await buffer in mic.buffers {
                do throws(AudioError) {
                    if let e = expected, buffer.sampleTime > e {
                        // The device was away: keep the file aligned to the clock with silence (at most 10 min).
                        var gap = min(buffer.sampleTime - e, Int64(rate * 600))
                        if let limit { gap = min(gap, max(0, limit - writer.framesWritten)) }
                        gapFrames += gap
                        while gap > 0 {
                            let n = Int(min(gap, 4096))
                            try writer.write(silence.view(frames: n))
                            gap -= Int64(n)
                        }
                    }
                    expected = buffer.sampleTime + Int64(buffer.frameCount)
                    var frames = buffer.frameCount
                    if let limit { frames = Int(min(Int64(frames), max(0, limit - writer.framesWritten))) }
                    if frames > 0 {
                        var writeError: AudioError?
                        buffer.withRawView { raw in
                            let view = BufferView(
                                base: raw.base.assumingMemoryBound(to: Float.self), channelStride: buffer.frameCount,
                                channelCount: channels, frameCount: frames)
                            do throws(AudioError) { try writer.write(view) } catch { writeError = error }
                        }
                        if let writeError { throw writeError }
                    }
                    if writer.framesWritten - lastCommit >= Int64(rate / 2) {
                        try writer.commitHeader()
                        lastCommit = writer.framesWritten
                    }
                } catch {
                    failure = error
                }
                if failure != nil { break }
                if let limit, writer.framesWritten >= limit { break }
            }
            mic.finish()
            withExtendedLifetime(signals) {}
            try writer.finish()
            events.cancel()
            let seconds = Double(writer.framesWritten) / rate
            print(
                "recorded \(output): \(writer.framesWritten) frames (\(String(cFormat: "%.3f", seconds)) s), "
                    + "\(channels) ch at \(formatHz(rate)); xruns \(mic.io.xrunCount), faults \(mic.io.faultCount), "
                    + "reconnects \(mic.io.reconnectCount), overflows \(mic.overflowCount)"
                    + (gapFrames > 0 ? String(cFormat: ", %.3f s of silence where the device was away", Double(gapFrames) / rate) : ""))
            if let failure { throw failure }
            let held = String(cFormat: "%.3f", seconds)
            if let gone = mic.io.failure {
                throw AudioError(gone.code, "\(gone.message); \(output) holds what came before (\(held) s)")
            }
            if let limit, writer.framesWritten < limit, !interrupted.isSet {
                throw AudioError(
                    .deviceUnavailable,
                    "the device was away when the \(String(cFormat: "%g", duration ?? 0)) s were up on the clock; "
                        + "\(output) holds what came before (\(held) s)")
            }
        } catch {
            throw fail(error)
        }
    }
}

struct Play: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Play an audio file (WAV, MP3, AAC, M4A, FLAC, Ogg: anything FFmpeg reads) on an output device.",
        discussion: "With --backend virtual, --device names the WAV file the speaker writes (whole cycles: the end is padded with silence to a period).")

    @Argument(help: "The audio file to play; at another rate than the device's it is resampled as it is read.")
    var file: String

    @Option(help: "The output device (PipeWire sink node name, ALSA PCM, JACK client, or for --backend virtual the WAV file to write; default: the default sink).")
    var device: String?

    @OptionGroup var options: DeviceOptions

    func run() async throws {
        do throws(AudioError) {
            let source = try FileSourceUnit(path: file)
            let format = source.outputFormats[0]
            let graph = try RenderGraph(format: format, maximumFrames: DeviceRequest.maximumPeriodFrames)
            let node = try graph.addNode(source, name: "file")
            try graph.connect(node, to: graph.output)
            var configuration = try options.configuration(input: nil, output: format, inputDevice: nil, outputDevice: device)
            // A virtual speaker run as fast as possible takes the file's frames (in whole cycles), not the silence
            // rendered until the loop below sees the end.
            if source.reader.isFrameCountExact { configuration.virtual.playbackFrames = source.frameCount }
            let io = try IOUnit(configuration)
            try io.setOutputGraph(graph)
            let events = printEvents(io.events)
            let stop = StopFlag()
            let signals = StopSignals { stop.set() }
            let grant = try io.start()
            note("playing \(file): \(grant)")
            // Until the file has played, Ctrl-C, or a fault that stops the device for good (reconnect off, or the
            // reconnect timeout).
            while !source.hasFinished, !stop.isSet, io.failure == nil {
                try? await Task.sleep(nanoseconds: 20_000_000)
            }
            // Let what the device still holds play out.
            if !stop.isSet, let g = io.grant {
                let tail = Double(g.outputLatencyFrames + g.periodFrames) / g.sampleRate
                if g.backend != .virtual { try? await Task.sleep(nanoseconds: UInt64(tail * 1e9)) }
            }
            io.stop()
            withExtendedLifetime(signals) {}
            events.cancel()
            print(
                "played \(file): \(String(cFormat: "%.3f", Double(source.totalFrames ?? 0) / format.sampleRate)) s; "
                    + "xruns \(io.xrunCount), faults \(io.faultCount), reconnects \(io.reconnectCount), "
                    + "read underruns \(source.underruns)")
            if let gone = io.failure { throw gone }
        } catch {
            throw fail(error)
        }
    }
}

/// A flag set from a signal handler and read by the command's loop.
final class StopFlag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}

struct Monitor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Ear monitoring: input → graph → output, within the device's own buffering.",
        discussion: """
            Without --graph, the input goes straight to the output. A graph file for monitoring has one node of \
            type "input" (the microphone; "channels" sets its channel count) where a file source would be; \
            see Examples/graphs/voice-chain.json. Ctrl-C stops.

            Buffering defaults to 256-frame periods × 2 (10.7 ms at 48 kHz) on ALSA, and to the server's period on \
            JACK, so the singer hears themself well within the 50 ms a karaoke app must stay under (good apps stay \
            under 20). At start it prints the round trip it expects: the device buffering plus the latency of the \
            graph's units (a limiter's lookahead). If the device reports xruns, raise --period or --periods.
            """)

    @Option(help: "The input device (for --backend virtual, the WAV file read as the microphone).")
    var input: String?

    @Option(help: "The output device (for --backend virtual, the WAV file written as the speaker).")
    var output: String?

    @OptionGroup var options: DeviceOptions

    @Option(help: "A graph file with an input node.")
    var graph: String?

    @Option(help: "Seconds to run (default: until Ctrl-C; a virtual input: its length).")
    var duration: Double?

    @Option(help: "Sample rate without --graph, Hz.")
    var rate: Double = 48_000

    @Option(help: "Input channels without --graph (the output is stereo).")
    var channels: Int = 1

    @Flag(help: "Time every cycle; print render time, callback jitter and load (p50/p99/p99.99/max) at the end.")
    var timing = false

    @Option(
        name: .customLong("status-interval"),
        help: """
            Print a status line every SECONDS while monitoring: time, cycles, xruns, faults, reconnects and the \
            expected round trip (for logs and long runs; default: only the summary at the end).
            """)
    var statusInterval: Double?

    @Flag(
        name: .customLong("voice-processing"),
        help: """
            Echo cancellation, noise suppression and gain control on the microphone (iOS's VoiceProcessingIO), \
            referenced to what the output plays; adds 24 ms, a period and 5 ms. Headphones need none of it.
            """)
    var voiceProcessing = false

    @Option(
        name: .customLong("noise-suppression"),
        help: "With --voice-processing: off, low, moderate, high or veryHigh (default: moderate).")
    var noiseSuppression: String?

    @Option(
        name: .customLong("gain-control"),
        help: "With --voice-processing: off, adaptiveDigital or fixedDigital (default: adaptiveDigital).")
    var gainControl: String?

    /// The voice-processing parameters the options ask for, by name (values as the unit's parameters take them).
    func voiceSettings() throws(AudioError) -> [(String, Float)] {
        var settings: [(String, Float)] = []
        for (flag, name, value) in [
            ("--noise-suppression", "noiseSuppression", noiseSuppression), ("--gain-control", "gainControl", gainControl),
        ] {
            guard let value else { continue }
            guard voiceProcessing else {
                throw AudioError(.invalidParameter, "\(flag) sets up voice processing: add --voice-processing")
            }
            let names = VoiceProcessingUnit.choices[name] ?? []
            guard let index = names.firstIndex(where: { $0.lowercased() == value.lowercased() }) else {
                throw AudioError(
                    .invalidParameter, "\(flag) takes \(names.joined(separator: ", ")), not '\(value)'")
            }
            settings.append((name, Float(index)))
        }
        return settings
    }

    func run() async throws {
        do throws(AudioError) {
            try validateDuration(duration)
            if let statusInterval, !(statusInterval >= 0.1 && statusInterval <= 86_400) {
                throw AudioError(.invalidParameter, "--status-interval takes 0.1 … 86400 seconds, not \(statusInterval)")
            }
            let voiceSettings = try voiceSettings()
            let renderGraph: RenderGraph
            let inputUnit: InputUnit
            if let graph {
                let loaded = try GraphFile.load(path: graph, maximumFrames: DeviceRequest.maximumPeriodFrames)
                renderGraph = loaded.graph
                inputUnit = try loaded.onlyInput(as: "a monitoring graph", meaning: "the microphone", source: graph).unit
            } else {
                renderGraph = try RenderGraph(
                    format: .graph(sampleRate: rate, channelCount: 2), maximumFrames: DeviceRequest.maximumPeriodFrames)
                inputUnit = try InputUnit(sampleRate: rate, channelCount: channels)
                let node = try renderGraph.addNode(inputUnit, name: "input")
                try renderGraph.connect(node, to: renderGraph.output)
            }
            let inputFormat = inputUnit.outputFormats[0]
            if voiceProcessing, !VoiceProcessingUnit.sampleRates.contains(inputFormat.sampleRate) {
                throw AudioError(
                    .unsupportedSampleRate,
                    "--voice-processing runs at 8000, 16000, 32000 or 48000 Hz, not \(formatHz(inputFormat.sampleRate)): "
                        + (graph == nil ? "give --rate one of those" : "run the graph's input node at one of those")
                        + " (a device at another rate is converted)")
            }
            let timingCapacity = CycleTimingLine.capacity(duration: duration, sampleRate: inputFormat.sampleRate)
            let stop = StopFlag()
            let signals = StopSignals { stop.set() }
            // Without --period and --periods, on ALSA, the lowest buffering the device holds without xruns: it starts
            // at the lowest rung and moves to the next when xruns repeat (JACK runs at the server's period).
            let backend = try options.parsedBackend()
            let adaptive = options.period == nil && options.periods == nil && backend == .alsa
            let ladder = adaptive ? DeviceOptions.monitorLadder : [DeviceOptions.monitorBuffering]
            var rung = 0
            var voiceUnit: VoiceProcessingUnit?
            var expectedRoundTrip = 0.0
            func open(_ rung: Int) throws(AudioError) -> (IOUnit, Task<Void, Never>, DeviceGrant) {
                var configuration = try options.configuration(
                    input: inputFormat, output: renderGraph.format, inputDevice: input, outputDevice: output,
                    buffering: ladder[rung])
                // Ear monitoring: a device at another rate converts with libsoxr's low quality, for its latency.
                configuration.conversionQuality = .low
                let io = try IOUnit(configuration)
                try io.setInputUnit(inputUnit)
                try io.setOutputGraph(renderGraph)
                if voiceProcessing {
                    let unit = try io.enableVoiceProcessing()
                    for (name, value) in voiceSettings { try unit.parameter(name).set(value) }
                    voiceUnit = unit
                }
                if timing { try io.recordCycleTimings(capacity: timingCapacity) }
                let events = printEvents(io.events)
                let grant = try io.start()
                let graphMilliseconds = (renderGraph.latency + io.captureProcessingLatency) * 1000
                let conversionMilliseconds = io.conversionLatency * 1000
                let bridgeMilliseconds = io.clockBridgeLatency * 1000
                let total = grant.nominalRoundTripMilliseconds + graphMilliseconds + conversionMilliseconds + bridgeMilliseconds
                expectedRoundTrip = total
                note(
                    "monitoring: \(grant); expected round trip "
                        + "\(String(cFormat: "%.2f", total)) ms (device "
                        + "buffering \(String(cFormat: "%.2f", grant.nominalRoundTripMilliseconds)) ms + graph "
                        + "\(String(cFormat: "%.2f", renderGraph.latency * 1000)) ms"
                        + (voiceProcessing
                            ? " + voice processing \(String(cFormat: "%.2f", io.captureProcessingLatency * 1000)) ms" : "")
                        + (conversionMilliseconds > 0
                            ? " + rate conversion \(String(cFormat: "%.2f", conversionMilliseconds)) ms" : "")
                        + (bridgeMilliseconds > 0 ? " + clock bridge \(String(cFormat: "%.2f", bridgeMilliseconds)) ms" : "")
                        + ")")
                return (io, events, grant)
            }
            var (io, events, grant) = try open(rung)
            // The unit's sample time counts the device's frames (its rate may differ from the graph's).
            var limit = duration.map { Int64(($0 * grant.sampleRate).rounded()) }
            if io.configuration.backend == .virtual, limit == nil, let input {
                limit = try WAVFileReader.info(path: input).frameCount
            }
            // What earlier rungs ran: the totals carry on across them.
            var earlier = (frames: Int64(0), cycles: 0, xruns: 0)
            var window = (start: monotonicNanoseconds(), xruns: 0)
            let bound = ClockBound(duration: duration, grace: ClockBound.deviceGrace(grant))
            let started = monotonicNanoseconds()
            var statusesPrinted = 0
            while !stop.isSet, !bound.hasPassed {
                if let limit, earlier.frames + io.sampleTime >= limit { break }
                if io.failure != nil { break }  // stopped for good by a fault
                let now = monotonicNanoseconds()
                if let statusInterval, Double(now - started) / 1e9 >= Double(statusesPrinted + 1) * statusInterval {
                    statusesPrinted = Int(Double(now - started) / 1e9 / statusInterval)
                    // Unbuffered, so a log or a pipe gets each line as it is printed.
                    StandardStream.output(
                        "status \(String(cFormat: "%.1f", Double(now - started) / 1e9)) s: "
                            + "\(String(cFormat: "%.3f", Double(earlier.frames + io.sampleTime) / grant.sampleRate)) s monitored, "
                            + "\(earlier.cycles + io.cycleCount) cycles, xruns \(earlier.xruns + io.xrunCount), "
                            + "faults \(io.faultCount), reconnects \(io.reconnectCount), "
                            + "round trip \(String(cFormat: "%.2f", expectedRoundTrip)) ms\n")
                }
                if io.xrunCount - window.xruns >= DeviceOptions.monitorXrunsToMove {
                    // The next rung that buffers more than the device granted (it may round a request up).
                    let held = grant.periodFrames * grant.periodCount
                    if let next = ladder.indices.first(where: { $0 > rung && ladder[$0].period * ladder[$0].periods > held }) {
                        note(
                            "xruns at \(grant.periodFrames) × \(grant.periodCount) frames: moving to "
                                + "\(ladder[next].period) × \(ladder[next].periods)")
                        io.stop()
                        events.cancel()
                        earlier = (earlier.frames + io.sampleTime, earlier.cycles + io.cycleCount, earlier.xruns + io.xrunCount)
                        rung = next
                        (io, events, grant) = try open(rung)
                        window = (monotonicNanoseconds(), 0)
                        continue
                    }
                }
                if now - window.start >= UInt64(DeviceOptions.monitorXrunWindowSeconds * 1e9) {
                    window = (now, io.xrunCount)
                }
                try? await Task.sleep(nanoseconds: 5_000_000)
            }
            io.stop()
            withExtendedLifetime(signals) {}
            events.cancel()
            print(
                "monitored \(String(cFormat: "%.3f", Double(earlier.frames + io.sampleTime) / grant.sampleRate)) s: "
                    + "\(earlier.cycles + io.cycleCount) cycles, xruns \(earlier.xruns + io.xrunCount), faults \(io.faultCount), "
                    + "reconnects \(io.reconnectCount); buffering \(grant.periodFrames) × \(grant.periodCount) frames")
            if let voiceUnit {
                print(
                    "voice processing: echo return loss enhancement "
                        + (voiceUnit.echoReturnLossEnhancement.map { String(cFormat: "%.1f dB", $0) } ?? "- (nothing played)")
                        + ", echo delay "
                        + (voiceUnit.estimatedDelay > 0 ? String(cFormat: "%.0f ms", voiceUnit.estimatedDelay * 1000) : "not found"))
            }
            if timing { CycleTimingLine.print(io.cycleTimings, sampleRate: grant.sampleRate, capacity: timingCapacity) }
            if let gone = io.failure { throw gone }
        } catch {
            throw fail(error)
        }
    }
}

struct Latency: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure the round-trip latency: play clicks, find them in the capture.",
        discussion: """
            The output must reach the input: a cable on hardware, a PulseAudio monitor source (--input \
            pulse with PULSE_SOURCE=SINK.monitor), or with JACK --device self (our output port looped to our \
            input port).
            """)

    @Option(help: "The device for both directions.")
    var device: String?

    @Option(help: "The input device (overrides --device).")
    var input: String?

    @Option(help: "The output device (overrides --device).")
    var output: String?

    @OptionGroup var options: DeviceOptions

    @Option(help: "Sample rate, Hz.")
    var rate: Double = 48_000

    @Option(help: "Clicks to play.")
    var clicks: Int = 5

    func run() throws {
        do throws(AudioError) {
            guard (1...100).contains(clicks) else {
                throw AudioError(.invalidFormat, "--clicks must be 1…100, got \(clicks)")
            }
            let mono = try StreamFormat.graph(sampleRate: rate, channelCount: 1)
            let configuration = try options.configuration(
                input: mono, output: mono, inputDevice: input ?? device, outputDevice: output ?? device)
            let m = try LatencyMeter.measure(configuration, sampleRate: rate, clicks: clicks)
            print("device: \(m.grant)")
            print(m.description)
            print(String(cFormat: "latency_ms=%.3f frames=%ld periods=%.2f", m.milliseconds, m.medianFrames, m.periods))
            // What the backend says the round trip is (capture latency + playback latency), beside what was measured.
            print(
                String(
                    cFormat: "reported_ms=%.3f input_frames=%ld output_frames=%ld", m.grant.nominalRoundTripMilliseconds,
                    m.grant.inputLatencyFrames, m.grant.outputLatencyFrames))
        } catch {
            throw fail(error)
        }
    }
}

/// `--timing` (monitor, karaoke): room for the run's cycles, and the line printed after it.
enum CycleTimingLine {
    /// Every cycle of the run at 16-frame periods, or a run without `--duration`'s first million.
    static func capacity(duration: Double?, sampleRate: Double) -> Int {
        duration.map { Int($0 * sampleRate / 16) + 4096 } ?? 1_000_000
    }

    static func print(_ timings: [CycleTiming], sampleRate: Double, capacity: Int) {
        Swift.print(
            "cycle timing: \(CycleTimingSummary(timings, sampleRate: sampleRate))"
                + (timings.count >= capacity ? " (the first \(capacity) cycles)" : ""))
    }
}
