import AudioDevices
import Foundation
import LiveAudio
import Testing
import TestSupport

/// Collects a microphone's buffers until `frames` frames have arrived (or the stream ends); throws after 60 s.
func collect(_ mic: MicrophoneSource, frames: Int) async throws -> [CapturedBuffer] {
    try await withTimeLimit(60, "\(frames) frames from the microphone") {
        var got: [CapturedBuffer] = []
        var total = 0
        for await buffer in mic.buffers {
            got.append(buffer)
            total += buffer.frameCount
            if total >= frames { break }
        }
        return got
    }
}

/// Every buffer left in a finished microphone's stream; throws if the stream has not ended within 30 s.
func drain(_ mic: MicrophoneSource) async throws -> [CapturedBuffer] {
    try await withTimeLimit(30, "the microphone's stream to end") {
        var all: [CapturedBuffer] = []
        for await b in mic.buffers { all.append(b) }
        return all
    }
}

/// The warnings a stopped I/O unit reported, read from its events up to the `.stopped` that `stop()` sends.
func warningsUntilStopped(_ io: IOUnit) async -> [String] {
    var warnings: [String] = []
    for await event in io.events {
        if case .warning(let w) = event { warnings.append(w) }
        if case .stopped = event { break }
    }
    return warnings
}

/// Concatenates captured buffers' channels.
func channels(of buffers: [CapturedBuffer]) -> [[Float]] {
    guard let first = buffers.first else { return [] }
    var out = Array(repeating: [Float](), count: first.format.channelCount)
    for b in buffers {
        let chans = b.floatChannels()
        for c in 0..<out.count { out[c] += chans[c] }
    }
    return out
}

/// Runs `voice-chain` style processing (input → eq → dynamics → reverb → delay → limiter → output) on a
/// virtual device fed by `input`, as fast as possible, and returns what the speaker file holds.
func monitorThroughVirtualDevice(input: String, output: String, sizes: VirtualDeviceOptions.CallbackSizes, period: Int = 256)
    async throws -> [[Float]]
{
    let json = """
        {"sampleRate": 48000, "channels": 2,
         "nodes": [
           {"id": "mic", "type": "input", "channels": 1},
           {"id": "eq", "type": "eq", "bands": [{"type": "highPass", "frequency": 90}, {"type": "peak", "frequency": 3000, "gain": 3, "q": 1}]},
           {"id": "comp", "type": "dynamics", "threshold": -24, "ratio": 3, "attack": 0.005, "release": 0.12},
           {"id": "room", "type": "reverb", "wetDryMix": 20},
           {"id": "echo", "type": "delay", "delayTime": 0.05, "feedback": 25, "wetDryMix": 15},
           {"id": "limit", "type": "limiter", "ceiling": -1}
         ],
         "connections": [
           {"from": "mic", "to": "eq"}, {"from": "eq", "to": "comp"}, {"from": "comp", "to": "room"},
           {"from": "room", "to": "echo"}, {"from": "echo", "to": "limit"}, {"from": "limit", "to": "output"}
         ]}
        """
    let loaded = try GraphFile.load(json: json, maximumFrames: 4096)
    let mic = loaded.inputUnits[0].unit
    let io = try IOUnit(
        IOUnit.Configuration(
            backend: .virtual, inputFormat: mic.outputFormats[0], outputFormat: loaded.graph.format, inputDevice: input,
            outputDevice: output, periodFrames: period,
            virtual: VirtualDeviceOptions(pacing: .asFastAsPossible, callbackSizes: sizes)))
    try io.setInputUnit(mic)
    try io.setOutputGraph(loaded.graph)
    let frames = Int64(try WAVFileReader.info(path: input).frameCount)
    try io.start()
    try await when({ io.sampleTime >= frames }, then: { io.stop() })
    let written = try FFmpeg.decode(output, channels: 2)
    return written.map { Array($0.prefix(Int(frames))) }
}

@Suite struct VirtualDeviceTests {
    /// Monitoring with the capture on a clock 0.1 % faster than the playback's (a virtual input told so): the I/O
    /// unit sees two clocks, says so, and bridges them — over five minutes of device time, run as fast as
    /// possible, no cycle runs dry and no capture is dropped, the tracked ratio settles on 1.001, and the bridge's
    /// level ends near its target (two periods, at least 1024 frames). Without the bridge the capture would pile up by 288 frames a
    /// minute.
    @Test func twoClocksAreBridged() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let tone = (0..<96_000).map { Float(0.25 * sin(2 * Double.pi * 1_000 * Double($0) / 48_000)) }
        try writeWAV(dir.file("in.wav"), channels: [tone])
        let mono = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
        var options = VirtualDeviceOptions(pacing: .asFastAsPossible, outputSampleType: .int16)
        options.inputClockRatio = 1.001
        let io = try IOUnit(
            IOUnit.Configuration(
                backend: .virtual, inputFormat: mono, outputFormat: mono, inputDevice: dir.file("in.wav"),
                outputDevice: dir.file("out.wav"), periodFrames: 256, reconnect: false, virtual: options))
        let graph = try RenderGraph(format: mono, maximumFrames: 4096)
        try graph.connect(try graph.addNode(try io.inputUnit()), to: graph.output)
        try io.setOutputGraph(graph)
        let grant = try io.start()
        let minutes = 5.0
        try await withTimeLimit(300, "five minutes of device time") {
            while io.sampleTime < Int64(minutes * 60 * 48_000) { try await Task.sleep(nanoseconds: 20_000_000) }
        }
        let ratio = io.clockRatio
        let level = io.clockBridgeLevel
        let shortfalls = io.clockShortfalls
        let resyncs = io.clockResyncs
        io.stop()
        let warnings = await warningsUntilStopped(io)
        #expect(grant.independentClocks && grant.description.contains("two clocks"))
        #expect(warnings.contains { $0.contains("two clocks") }, "\(warnings)")
        #expect(shortfalls == 0 && resyncs == 0)
        #expect(abs((ratio ?? 0) - 1.001) < 2e-5, "tracked \(String(describing: ratio))")
        #expect(abs((level ?? 0) - 1024) <= 256, "the bridge holds \(String(describing: level)) frames")
    }

    /// The playback stalls for 40 ms (as an xrun and restart would make it) a minute into a two-clock monitor run:
    /// the capture that piled up meanwhile (about 1,900 frames) arrives with the next cycle, and the I/O unit,
    /// seeing the gap in the sample time, has the bridge drop it — once — rather than keep it as latency. The pile
    /// is below the level at which the bridge would drop capture unasked, so only the gap can have told it. Then
    /// nothing runs dry or over, the level is back near its target and the ratio on 1.001.
    @Test func aPlaybackStallOnTwoClocksIsResynced() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let tone = (0..<96_000).map { Float(0.25 * sin(2 * Double.pi * 1_000 * Double($0) / 48_000)) }
        try writeWAV(dir.file("in.wav"), channels: [tone])
        let mono = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
        var options = VirtualDeviceOptions(pacing: .asFastAsPossible, outputSampleType: .int16)
        options.inputClockRatio = 1.001
        options.playbackStall = .init(at: 60, seconds: 0.04)
        let io = try IOUnit(
            IOUnit.Configuration(
                backend: .virtual, inputFormat: mono, outputFormat: mono, inputDevice: dir.file("in.wav"),
                outputDevice: dir.file("out.wav"), periodFrames: 256, reconnect: false, virtual: options))
        let graph = try RenderGraph(format: mono, maximumFrames: 4096)
        try graph.connect(try graph.addNode(try io.inputUnit()), to: graph.output)
        try io.setOutputGraph(graph)
        _ = try io.start()
        try await withTimeLimit(120, "90 s of device time") {
            while io.sampleTime < Int64(90 * 48_000) { try await Task.sleep(nanoseconds: 20_000_000) }
        }
        let ratio = io.clockRatio
        let level = io.clockBridgeLevel
        let shortfalls = io.clockShortfalls
        let resyncs = io.clockResyncs
        io.stop()
        _ = await warningsUntilStopped(io)
        #expect(resyncs == 1, "the bridge resynced \(resyncs) times")
        #expect(shortfalls == 0)
        #expect(abs((ratio ?? 0) - 1.001) < 2e-5, "tracked \(String(describing: ratio))")
        #expect(abs((level ?? 0) - 1024) <= 256, "the bridge holds \(String(describing: level)) frames")
    }

    /// A Float32 file captured through the virtual microphone arrives bit for bit, in order, with contiguous
    /// sample times; the stream ends with finish().
    @Test func capturesTheFileExactly() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let signal = SignalCheck.testSignal(seconds: 1)
        try writeWAV(dir.file("in.wav"), channels: signal)
        let mic = try MicrophoneSource(
            device: dir.file("in.wav"), backend: .virtual, channels: 2, sampleType: .float32, interleaved: true,
            periodFrames: 441, virtual: VirtualDeviceOptions(pacing: .asFastAsPossible))
        let grant = try mic.start()
        #expect(grant.backend == .virtual && grant.sampleRate == 48_000 && grant.periodFrames == 441)
        let buffers = try await collect(mic, frames: 48_000)
        mic.finish()
        var expected: Int64 = 0
        for b in buffers {
            #expect(b.sampleTime == expected)
            expected += Int64(b.frameCount)
        }
        let got = channels(of: buffers)
        #expect(Array(got[0].prefix(48_000)) == signal[0])
        #expect(Array(got[1].prefix(48_000)) == signal[1])
    }

    /// iOS capture code's format: 48 kHz mono Int16 interleaved, converted from a Float32 file with rounding.
    @Test func deliversTheClientFormat() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let samples: [Float] = (0..<4800).map { Float(sin(Double($0) * 0.01)) * 0.5 }
        try writeWAV(dir.file("in.wav"), channels: [samples])
        let mic = try MicrophoneSource(
            device: dir.file("in.wav"), backend: .virtual, channels: 1, sampleType: .int16,
            periodFrames: 480, virtual: VirtualDeviceOptions(pacing: .asFastAsPossible))
        try mic.start()
        let buffers = try await collect(mic, frames: 4800)
        mic.finish()
        let first = try #require(buffers.first)
        #expect(first.format.sampleType == .int16 && first.bytes.count == 480 * 2)
        let ints = buffers.flatMap { b in
            stride(from: 0, to: b.bytes.count, by: 2).map { Int16(bitPattern: UInt16(b.bytes[$0]) | UInt16(b.bytes[$0 + 1]) << 8) }
        }
        for i in [0, 1, 100, 1234, 4799] {
            #expect(ints[i] == Int16((samples[i] * 32768).rounded()))
        }
    }

    /// Muted, the microphone delivers zeros and the sample times go on; unmuted, the signal is back.
    @Test func muteKeepsTimestamps() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Mute and unmute are switched from a thread of its own at set sample times, and the stream is read
        // afterwards: tests running in parallel may keep this task off the cooperative pool for a long time.
        try writeWAV(dir.file("in.wav"), channels: [[Float](repeating: 0.5, count: 48_000)])
        let mic = try MicrophoneSource(
            device: dir.file("in.wav"), backend: .virtual, channels: 1, sampleType: .float32, periodFrames: 480,
            virtual: VirtualDeviceOptions(pacing: .realTime))
        mic.isMuted = true
        try mic.start()
        try await offPool {
            defer { mic.finish() }
            try waitUntil("4800 frames") { mic.io.sampleTime >= 4800 }
            mic.isMuted = false
            try waitUntil("9600 frames") { mic.io.sampleTime >= 9600 }
        }
        var all: [CapturedBuffer] = []
        all += try await drain(mic)
        let levels = all.map { b in Set(b.floatChannels()[0]) }
        #expect(levels.first == [0], "muted: zeros")
        #expect(levels.last == [0.5], "unmuted: the signal")
        // Zeros, then the signal: a single switch, at a buffer boundary or inside one buffer.
        let firstSignal = try #require(levels.firstIndex { $0.contains(0.5) })
        #expect(levels[..<firstSignal].allSatisfy { $0 == [0] })
        #expect(levels[(firstSignal + 1)...].allSatisfy { $0 == [0.5] })
        #expect(all.count >= 20)
        for (a, b) in zip(all, all.dropFirst()) { #expect(b.sampleTime == a.sampleTime + Int64(a.frameCount)) }
        #expect(mic.overflowCount == 0)
    }

    /// A consumer that does not read: the real-time side never waits, drops what does not fit and counts it;
    /// what was kept is contiguous from the start.
    @Test func overflowIsCountedNotWaitedOn() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("in.wav"), channels: [[Float](repeating: 0.1, count: 48_000)])
        let mic = try MicrophoneSource(
            device: dir.file("in.wav"), backend: .virtual, channels: 1, sampleType: .float32, periodFrames: 480,
            virtual: VirtualDeviceOptions(pacing: .asFastAsPossible), bufferedSeconds: 0.05)
        try mic.start()
        try await when({ mic.io.sampleTime >= 48_000 }, then: { mic.stop() })
        #expect(mic.overflowCount > 0)
        var kept: [CapturedBuffer] = []
        mic.finish()
        kept += try await drain(mic)
        #expect(kept.count == 5, "the ring holds 0.05 s: five periods of 480")
        #expect(kept.map(\.sampleTime) == [0, 480, 960, 1440, 1920])
    }

    /// Callback sizes that change every cycle (random 1…700 frames, or a fixed odd pattern) give the same
    /// monitored output, bit for bit, as 256-frame cycles: the graph's result does not depend on how the device
    /// slices time.
    @Test func varyingCallbackSizesGiveTheSameOutput() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let signal = SignalCheck.testSignal(seconds: 2)
        try writeWAV(dir.file("voice.wav"), channels: [signal[0]])
        let fixed = try await monitorThroughVirtualDevice(input: dir.file("voice.wav"), output: dir.file("fixed.wav"), sizes: .fixed)
        let random = try await monitorThroughVirtualDevice(
            input: dir.file("voice.wav"), output: dir.file("random.wav"), sizes: .random(range: 1...700, seed: 7))
        let pattern = try await monitorThroughVirtualDevice(
            input: dir.file("voice.wav"), output: dir.file("pattern.wav"), sizes: .sequence([1, 441, 128, 1000, 3]))
        #expect(fixed[0].count == 96_000)
        #expect(fixed[0].contains { abs($0) > 0.05 }, "the chain passes the signal")
        #expect(random == fixed)
        #expect(pattern == fixed)
    }

    /// The karaoke case: one duplex I/O unit monitors the voice through a graph while a MicrophoneSource on the
    /// same unit records it. The recording is the input exactly (in Int16), the speaker gets it 6.02 dB down,
    /// and both run on one clock: the same frames, the same sample times.
    @Test func microphoneOnADuplexUnit() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let samples: [Float] = (0..<24_000).map { Float(sin(Double($0) * 0.02)) * 0.5 }
        try writeWAV(dir.file("in.wav"), channels: [samples])
        let json = """
            {"sampleRate": 48000, "channels": 2,
             "nodes": [{"id": "mic", "type": "input", "channels": 1}, {"id": "trim", "type": "gain", "gain": -6.0206}],
             "connections": [{"from": "mic", "to": "trim"}, {"from": "trim", "to": "output"}]}
            """
        let loaded = try GraphFile.load(json: json, maximumFrames: 4096)
        let voice = try StreamFormat(sampleRate: 48_000, channelCount: 1, sampleType: .int16, interleaved: true)
        let io = try IOUnit(
            IOUnit.Configuration(
                backend: .virtual, inputFormat: voice, outputFormat: loaded.graph.format, inputDevice: dir.file("in.wav"),
                outputDevice: dir.file("out.wav"), periodFrames: 480,
                virtual: VirtualDeviceOptions(pacing: .asFastAsPossible, callbackSizes: .random(range: 1...900, seed: 5))))
        try io.setInputUnit(loaded.inputUnits[0].unit)
        try io.setOutputGraph(loaded.graph)
        let mic = try MicrophoneSource(io: io, bufferedSeconds: 2)
        #expect(mic.format == voice)
        try mic.start()
        try await offPool {
            defer { mic.finish() }
            try waitUntil("24000 frames") { io.sampleTime >= 24_000 }
        }
        var recorded: [CapturedBuffer] = []
        recorded += try await drain(mic)
        // The stream is read only after the run, and the device runs on as fast as it can until finish(): on a
        // busy machine the ring (2 s) may fill with what came after the input, and those later periods are the
        // ones dropped. The input itself must all be there, from sample time 0 on.
        #expect(recorded.reduce(0) { $0 + $1.frameCount } >= 24_000)
        var expected: Int64 = 0
        for b in recorded {
            #expect(b.sampleTime == expected)
            expected += Int64(b.frameCount)
        }
        let voiceOut = Array(channels(of: recorded)[0].prefix(24_000))
        let reference = samples.map { Float(Int16(($0 * 32768).rounded())) / 32768 }
        #expect(voiceOut == reference)
        let speaker = try FFmpeg.decode(dir.file("out.wav"), channels: 2)
        #expect(speaker[0].count >= 24_000 && speaker[0].count == speaker[1].count)
        // The speaker hears the float input (the graph is fed before the Int16 conversion) at half amplitude.
        #expect(maxAbsDifference(Array(speaker[0].prefix(24_000)), samples.map { $0 * 0.5 }) < 1e-6)
    }

    /// A microphone needs a unit with capture, positive buffering, and a unit that is not running.
    @Test func microphoneOnAUnitErrors() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("in.wav"), channels: [[Float](repeating: 0, count: 48_000)])
        let stereo = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        let playbackOnly = try IOUnit(
            IOUnit.Configuration(backend: .virtual, outputFormat: stereo, outputDevice: dir.file("out.wav")))
        do throws(AudioError) {
            _ = try MicrophoneSource(io: playbackOnly)
            Issue.record("a playback-only unit accepted a microphone")
        } catch {
            #expect(error.code == .invalidFormat && error.message.contains("capture"))
        }
        let capture = try IOUnit(
            IOUnit.Configuration(
                backend: .virtual, inputFormat: stereo, inputDevice: dir.file("in.wav"),
                virtual: VirtualDeviceOptions(pacing: .realTime)))
        do throws(AudioError) {
            _ = try MicrophoneSource(io: capture, bufferedSeconds: 0)
            Issue.record("zero buffering accepted")
        } catch {
            #expect(error.code == .invalidParameter)
        }
        try capture.start()
        defer { capture.stop() }
        do throws(AudioError) {
            _ = try MicrophoneSource(io: capture)
            Issue.record("a running unit accepted a microphone")
        } catch {
            #expect(error.code == .invalidState)
        }
    }

    /// Cycle timing: every cycle of a run is recorded (start, duration, sample time, frames) until the capacity is
    /// reached, and not one more; the records follow the device's cycles in order.
    @Test func recordsCycleTimings() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("in.wav"), channels: [[Float](repeating: 0.1, count: 9600)])
        let mono = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
        func run(capacity: Int) async throws -> (IOUnit, [CycleTiming]) {
            let io = try IOUnit(
                IOUnit.Configuration(
                    backend: .virtual, inputFormat: mono, inputDevice: dir.file("in.wav"), periodFrames: 480,
                    virtual: VirtualDeviceOptions(pacing: .asFastAsPossible, callbackSizes: .sequence([480, 100, 7]))))
            try io.setCaptureHandler { _, _ in }
            try io.recordCycleTimings(capacity: capacity)
            try io.start()
            // Stopped from a thread of its own: running as fast as it can, the device must not outrun the
            // capacity while this task waits for a cooperative thread.
            try await offPool {
                defer { io.stop() }
                try waitUntil("9600 frames", interval: 200) { io.sampleTime >= 9600 }
            }
            return (io, io.cycleTimings)
        }
        let (io, all) = try await run(capacity: 1_000_000)
        #expect(all.count == io.cycleCount && all.count >= 9600 / 587 * 3, "\(all.count) of \(io.cycleCount)")
        #expect(Array(all.prefix(4).map(\.frames)) == [480, 100, 7, 480])
        for (a, b) in zip(all, all.dropFirst()) {
            #expect(b.sampleTime == a.sampleTime + Int64(a.frames))
            #expect(b.start >= a.start + a.duration)
        }
        let (_, ten) = try await run(capacity: 10)
        #expect(ten.count == 10 && ten.allSatisfy(\.usageMeasured))
        #expect(ten.map(\.sampleTime) == Array(all.prefix(10).map(\.sampleTime)))
        let summary = CycleTimingSummary(all, sampleRate: 48_000)
        #expect(summary.cycles == all.count && summary.jitterMicroseconds.count == all.count - 1)
        #expect(CycleTimingSummary(Array(all.prefix(9)), sampleRate: 48_000).typicalFrames == 480, "ties: the largest")

        do throws(AudioError) {
            try io.recordCycleTimings(capacity: -1)
            Issue.record("a negative capacity was accepted")
        } catch {
            #expect(error.code == .invalidParameter)
        }
    }

    /// A cycle's CPU time and context switches tell the thread's own work from waiting: a cycle that sleeps 3 ms
    /// ran for almost none of it and gave up its CPU (a blocked cycle), one that computes for 3 ms of its CPU is
    /// seen to (however long the machine took to give it that), and no cycle's CPU time is more than its wall time.
    @Test func cycleTimingsTellWorkFromWaiting() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("in.wav"), channels: [[Float](repeating: 0.1, count: 9600)])
        let mono = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
        let io = try IOUnit(
            IOUnit.Configuration(
                backend: .virtual, inputFormat: mono, inputDevice: dir.file("in.wav"), periodFrames: 480,
                virtual: VirtualDeviceOptions(pacing: .asFastAsPossible)))
        nonisolated(unsafe) var cycle = 0
        try io.setCaptureHandler { _, _ in
            // The device's thread only.
            cycle += 1
            if cycle == 4 { usleep(3000) }
            if cycle == 8 {
                // 3 ms of this thread's CPU, however long the machine takes to give it that much.
                func cpu() -> UInt64 {
                    var t = timespec()
                    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
                    return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
                }
                let end = cpu() + 3_000_000
                var x = 1.0
                while cpu() < end { x = (x * 1.000001).squareRoot() }
                if x == 0 { print(x) }
            }
        }
        try io.recordCycleTimings(capacity: 100)
        try io.start()
        try await offPool {
            defer { io.stop() }
            try waitUntil("9600 frames", interval: 200) { io.sampleTime >= 9600 }
        }
        let timings = io.cycleTimings
        try #require(timings.count >= 10)
        let slept = timings[3], worked = timings[7]
        #expect(slept.duration >= 3_000_000 && slept.voluntarySwitches >= 1, "\(slept)")
        #expect(slept.cpuTime < slept.duration / 4, "\(slept)")
        #expect(worked.duration >= 3_000_000 && worked.cpuTime >= 3_000_000 && worked.voluntarySwitches == 0, "\(worked)")
        // The CPU time is read within the cycle's clock readings; the wall clock may be slewed by NTP (0.05 %).
        for t in timings { #expect(t.usageMeasured && t.cpuTime <= t.duration + t.duration / 1000 + 1000, "\(t)") }
        #expect(timings.reduce(0) { $0 + $1.cpuTime } > 0)
        let summary = CycleTimingSummary(timings, sampleRate: 48_000)
        #expect(summary.blockedCycles >= 1 && summary.cpuMicroseconds.max >= 3000, "\(summary)")
    }

    /// Percentiles by nearest rank, and a summary's arithmetic on timings made up by hand: 100-frame cycles at
    /// 48 kHz stand for 2083.3 µs each; a reconnect's gap is not jitter.
    @Test func cycleTimingSummaryArithmetic() {
        let p = Percentiles((1...10_000).reversed().map(Double.init))
        #expect(p.count == 10_000 && p.p50 == 5000 && p.p99 == 9900 && p.p9999 == 9999 && p.max == 10_000)
        #expect(Percentiles([]).p99 == 0 && Percentiles([7]).p9999 == 7)
        let period = 100.0 * 1e9 / 48_000  // ns
        let starts: [Double] = [0, period + 10_000, 2 * period + 10_000, 3 * period - 5_000]
        var timings = starts.enumerated().map { i, s in
            CycleTiming(start: UInt64(s), duration: 500_000, sampleTime: Int64(i * 100), frames: 100, usageMeasured: true)
        }
        // A reconnect: the sample time jumps, the start is a second later.
        timings.append(
            CycleTiming(start: UInt64(starts[3] + 1e9), duration: 1_000_000, sampleTime: 48_400, frames: 100,
                        cpuTime: 200_000, voluntarySwitches: 2, involuntarySwitches: 1, usageMeasured: true))
        timings[1].involuntarySwitches = 1
        timings[0].pageFaults = 3  // the first cycle's do not count
        timings[2].pageFaults = 1
        let s = CycleTimingSummary(timings, sampleRate: 48_000)
        #expect(s.jitterMicroseconds.count == 3)
        #expect(abs(s.jitterMicroseconds.p50 - 10) < 0.01 && abs(s.jitterMicroseconds.max - 15) < 0.01)
        #expect(s.renderMicroseconds.p50 == 500 && s.renderMicroseconds.max == 1000)
        #expect(abs(s.load.max - 1_000_000 / period) < 1e-9)
        #expect(s.description.hasPrefix("5 cycles of 100 frames (2.08 ms): render p50 500.00,"))
        #expect(s.cpuMicroseconds.max == 200 && s.cpuMicroseconds.p50 == 0)
        #expect(s.blockedCycles == 1 && s.preemptedCycles == 2 && s.faultedCycles == 1)
        // A cycle whose usage was not measured has no CPU time to show.
        #expect(CycleTimingSummary([CycleTiming(start: 0, duration: 9, sampleTime: 0, frames: 100)], sampleRate: 48_000).cpuMicroseconds.count == 0)
        #expect(s.description.hasSuffix("CPU p50 0.00, p99 200.00, max 200.00 µs; cycles blocked 1, preempted 2, faulted 1"), "\(s.description)")
    }

    /// Run as fast as possible, the virtual device waits for a file source's read-ahead instead of outrunning it:
    /// a reader that takes 20 ms per read still plays out exactly, with no underruns. (Paced in real time, the
    /// same reader could not keep up, and the silence would be counted.)
    @Test func fastPacingWaitsForFilesReadAhead() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Three seconds: more than the source's ring holds (32768 frames for 256-frame cycles).
        let signal = SignalCheck.testSignal(seconds: 3)
        try writeWAV(dir.file("in.wav"), channels: signal)
        let source = try FileSourceUnit(reader: SlowReader(try WAVFileReader(path: dir.file("in.wav")), delay: 0.02))
        let graph = try RenderGraph(format: source.outputFormats[0], maximumFrames: 256)
        try graph.connect(try graph.addNode(source, name: "file"), to: graph.output)
        let io = try IOUnit(
            IOUnit.Configuration(
                backend: .virtual, outputFormat: graph.format, outputDevice: dir.file("out.wav"), periodFrames: 256,
                virtual: VirtualDeviceOptions(pacing: .asFastAsPossible)))
        try io.setOutputGraph(graph)
        try io.start()
        try await when({ source.hasFinished }, then: { io.stop() })
        let out = try FFmpeg.decode(dir.file("out.wav"), channels: 2)
        #expect(source.underruns == 0)
        #expect(out[0].count >= 144_000)
        #expect(Array(out[0].prefix(144_000)) == signal[0] && Array(out[1].prefix(144_000)) == signal[1])
    }

    /// Paced in real time, half a second of input takes at least half a second.
    @Test func realTimePacing() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("in.wav"), channels: [[Float](repeating: 0, count: 24_000)])
        let mono = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
        let io = try IOUnit(
            IOUnit.Configuration(backend: .virtual, inputFormat: mono, inputDevice: dir.file("in.wav"), periodFrames: 480))
        let started = Date()
        try io.start()
        while io.sampleTime < 24_000 { try await Task.sleep(nanoseconds: 1_000_000) }
        let elapsed = Date().timeIntervalSince(started)
        io.stop()
        #expect(elapsed >= 0.48)
    }

    /// Bad requests and files: clear errors, nothing started.
    @Test func clearErrors() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("44k.wav"), channels: [[0, 0]], sampleRate: 44_100)
        let mono = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
        func startError(_ c: IOUnit.Configuration) -> AudioError? {
            do throws(AudioError) {
                let io = try IOUnit(c)
                try io.start()
                io.stop()
                return nil
            } catch {
                return error
            }
        }
        let rate = startError(IOUnit.Configuration(backend: .virtual, inputFormat: mono, inputDevice: dir.file("44k.wav")))
        #expect(rate?.code == .unsupportedSampleRate && rate?.message.contains("--rate 44100") == true)
        let missing = startError(IOUnit.Configuration(backend: .virtual, inputFormat: mono, inputDevice: dir.file("nope.wav")))
        #expect(missing?.code == .fileIO)
        let noFile = startError(IOUnit.Configuration(backend: .virtual, inputFormat: mono))
        #expect(noFile?.code == .unknownDevice)
        let nothing = startError(IOUnit.Configuration(backend: .virtual))
        #expect(nothing?.code == .invalidFormat)
        let period = startError(IOUnit.Configuration(backend: .virtual, inputFormat: mono, inputDevice: dir.file("44k.wav"), periodFrames: 3))
        #expect(period?.code == .invalidFormat && period?.message.contains("period") == true)
    }
}

/// A file reader that sleeps before each read: a slow disk or network share.
final class SlowReader: AudioFileReader {
    let base: any AudioFileReader
    let delay: Double
    init(_ base: any AudioFileReader, delay: Double) {
        self.base = base
        self.delay = delay
    }
    var path: String { base.path }
    var sampleRate: Double { base.sampleRate }
    var channelCount: Int { base.channelCount }
    var frameCount: Int64 { base.frameCount }
    var isFrameCountExact: Bool { base.isFrameCountExact }
    func read(into destination: BufferView) throws(AudioError) -> Int {
        Thread.sleep(forTimeInterval: delay)
        return try base.read(into: destination)
    }
    func seek(toFrame frame: Int64) throws(AudioError) { try base.seek(toFrame: frame) }
}
