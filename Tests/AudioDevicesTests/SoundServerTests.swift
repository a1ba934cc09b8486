import AudioDevices
import Foundation
import Synchronization
import LiveAudio
import Testing
import TestSupport

/// Through a real PulseAudio server (started by each test, stopped by PID) and libasound's pulse plugin, in this
/// process. Serialized: the plugin finds the server through this process's environment.
@Suite(.serialized) struct PulseAudioDeviceTests {
    /// The test plays a reference signal into the null sink "mic"; the microphone captures its monitor through
    /// ALSA (`pulse:mic.monitor`). After alignment: correlation ≥ 0.99 per channel, level within 0.1 dB, sample
    /// times contiguous, host times those of the recent past.
    @Test func capturesWhatIsPlayedIntoTheMicSink() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["mic", "spk"])
        defer { pulse.stop() }
        pulse.exportToThisProcess()
        try pulse.keepMonitorAlive("mic")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let signal = SignalCheck.testSignal(seconds: 2)
        try writeWAV(dir.file("signal.wav"), channels: signal, sampleType: .int16)

        // The device is driven from a thread of its own (wait for data, play, capture 3 s more, stop), and the
        // stream is read afterwards: tests running in parallel may keep this test's task off the two-thread
        // cooperative pool for a long time, and what is checked here is the audio, not the scheduling.
        let mic = try MicrophoneSource(
            device: "pulse:mic.monitor", backend: .alsa, channels: 2, sampleType: .float32, interleaved: true,
            periodFrames: 960, periodCount: 4, bufferedSeconds: 30)
        let grant = try mic.start()
        #expect(grant.backend == .alsa && grant.inputChannels == 2 && grant.sampleRate == 48_000)
        let file = dir.file("signal.wav")
        try await offPool {
            let deadline = Date().addingTimeInterval(15)
            while mic.io.sampleTime < 960, Date() < deadline { usleep(1000) }
            let playedAt = mic.io.sampleTime
            let player = try pulse.play(file, to: "mic")
            while mic.io.sampleTime < playedAt + 3 * 48_000, Date() < deadline { usleep(1000) }
            player.wait(timeout: 5)
            mic.finish()
        }
        let buffers = try await withTimeLimit(30, "the microphone's stream to end") {
            var all: [CapturedBuffer] = []
            for await b in mic.buffers { all.append(b) }
            return all
        }
        try #require(!buffers.isEmpty)

        var expected = buffers[0].sampleTime
        for b in buffers {
            #expect(b.sampleTime == expected)
            expected += Int64(b.frameCount)
        }
        let now = DispatchTime.now().uptimeNanoseconds
        #expect(buffers.last!.hostTime < now, "host time is CLOCK_MONOTONIC, in the past")
        #expect(zip(buffers, buffers.dropFirst()).allSatisfy { $0.hostTime <= $1.hostTime })

        let recorded = channels(of: buffers)
        let lag = try #require(SignalCheck.lag(of: signal[0], in: recorded[0]))
        for c in 0..<2 {
            let r = SignalCheck.compare(signal[c], recorded[c], lag: lag)
            #expect(r.frames > 90_000)
            #expect(r.correlation >= 0.99, "channel \(c): correlation \(r.correlation)")
            #expect(abs(r.levelDB) <= 0.1, "channel \(c): level \(r.levelDB) dB")
        }
        #expect(mic.overflowCount == 0)
    }

    /// The I/O unit plays a graph (a buffer player) into the null sink "spk"; parec records its monitor.
    @Test func playsIntoTheSpeakerSink() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["mic", "spk"])
        defer { pulse.stop() }
        pulse.exportToThisProcess()
        try pulse.keepMonitorAlive("spk")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let signal = SignalCheck.testSignal(seconds: 2)
        let recorder = try pulse.record("spk", to: dir.file("spk.wav"))
        try await Task.sleep(nanoseconds: 300_000_000)

        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        let graph = try RenderGraph(format: format, maximumFrames: 4096)
        let player = try BufferPlayerUnit(buffer: PCMBuffer(channels: signal), sampleRate: 48_000, loop: false)
        try graph.connect(try graph.addNode(player, name: "player"), to: graph.output)
        let io = try IOUnit(
            IOUnit.Configuration(backend: .alsa, outputFormat: format, outputDevice: "pulse:spk", periodFrames: 960, periodCount: 4))
        try io.setOutputGraph(graph)
        let grant = try io.start()
        #expect(grant.outputChannels == 2 && grant.outputLatencyFrames >= 960)
        while !player.hasFinished { try await Task.sleep(nanoseconds: 10_000_000) }
        try await Task.sleep(nanoseconds: 300_000_000)
        io.stop()
        recorder.stop(signal: SIGINT)
        #expect(io.xrunCount == 0)

        let recorded = try FFmpeg.decode(dir.file("spk.wav"), channels: 2)
        let lag = try #require(SignalCheck.lag(of: signal[0], in: recorded[0]))
        for c in 0..<2 {
            let r = SignalCheck.compare(signal[c], recorded[c], lag: lag)
            #expect(r.frames > 90_000)
            #expect(r.correlation >= 0.99, "channel \(c): correlation \(r.correlation)")
            #expect(abs(r.levelDB) <= 0.1, "channel \(c): level \(r.levelDB) dB")
        }
    }

    /// A cycle that takes far longer than the device buffer (400 ms against 80 ms) makes an underrun: it is
    /// detected, counted, reported as an event, and the stream goes on.
    @Test func xrunsAreCountedAndRecovered() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["spk"])
        defer { pulse.stop() }
        pulse.exportToThisProcess()
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        let io = try IOUnit(
            IOUnit.Configuration(backend: .alsa, outputFormat: format, outputDevice: "pulse:spk", periodFrames: 960, periodCount: 4))
        let stall = StallOnce(atCycle: 20, microseconds: 400_000)
        try io.setOutputCallback { raw, stamp in
            memset(raw.base, 0, raw.byteCountPerPlane * raw.format.bufferCount)
            stall.tick(sampleTime: stamp.sampleTime, frames: raw.frameCount)  // a deliberately misbehaving render callback
        }
        try io.start()
        let events = io.events
        let sawEvent = try await withTimeLimit(10, "an xrun event") { () async -> Bool in
            for await event in events {
                if case .xrun(let total) = event, total >= 1 { return true }
            }
            return false
        }
        let cyclesAtXrun = io.cycleCount
        let resumed = Date()
        while io.cycleCount <= cyclesAtXrun + 5, Date().timeIntervalSince(resumed) < 5 {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        #expect(io.cycleCount > cyclesAtXrun + 5, "cycles go on after the xrun")
        print("xrun test: cycles resumed after \(Date().timeIntervalSince(resumed)) s")
        io.stop()
        #expect(sawEvent)
        #expect(io.xrunCount >= 1)
        #expect(io.faultCount == 0, "an xrun is recovered, not a fault")
        // The time lost is a gap in the sample times: the cycle took 400 ms where a period is 20 ms, and the
        // buffer (80 ms) ran dry for most of it.
        let gap = Double(stall.largestGap) / 48_000
        #expect(gap > 0.25 && gap < 1, "the sample times jumped \(gap) s")
    }

    /// An unknown device name is an error that lists the devices there are.
    @Test func unknownDeviceListsTheDevices() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["spk"])
        defer { pulse.stop() }
        pulse.exportToThisProcess()
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        let io = try IOUnit(IOUnit.Configuration(backend: .alsa, outputFormat: format, outputDevice: "nosuchdevice"))
        #expect {
            try io.start()
        } throws: { error in
            guard let e = error as? AudioError else { return false }
            return e.code == .unknownDevice && e.message.contains("'nosuchdevice'") && e.message.contains("default")
                && e.message.contains("pulse")
        }
        let devices = try AudioDevices.list(.alsa)
        #expect(devices.contains { $0.name == "default" && $0.isDefault && $0.directions == .duplex })
        #expect(devices.contains { $0.name == "pulse" })
    }

    /// Capture and playback on two clocks through ALSA, as for a USB microphone and a headset: asked for here
    /// (`clocks: .two`), since two PCMs of a sound server have no cards for ALSA to compare and count as one clock
    /// unless asked. Playback paces the cycles, each cycle reads whatever capture holds, and the drift bridge
    /// resamples it onto the playback clock. Both null sinks run on the system clock, but PulseAudio delivers the
    /// capture in bursts whose timing shifts over seconds (its timer-based scheduling adapts its own buffering),
    /// and the bridge follows the level it sees: the tracked ratio has been seen to wander 1·10⁻³ around 1 (the
    /// bound here is 2·10⁻³, a tenth of the bridge's range). After 15 s a 1 kHz tone played into "mic" comes out
    /// of "spk" at 1 kHz within 1 Hz over two seconds, at its level within 0.1 dB, without a glitch (no second
    /// difference beyond a clean tone's 0.0043 plus a margin: a dropped or repeated frame makes about 0.3); no
    /// cycle runs dry, no capture is dropped, no xrun. The one-clock default on the same PCMs is checked too.
    @Test func twoClocksThroughTheSoundServer() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["mic", "spk"])
        defer { pulse.stop() }
        pulse.exportToThisProcess()
        try pulse.keepMonitorAlive("mic")
        try pulse.keepMonitorAlive("spk")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let tone = (0..<(4 * 48_000)).map { Float(0.25 * sin(2 * Double.pi * 1_000 * Double($0) / 48_000)) }
        try writeWAV(dir.file("tone.wav"), channels: [tone, tone], sampleType: .float32)
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        var configuration = IOUnit.Configuration(
            backend: .alsa, inputFormat: format, outputFormat: format, inputDevice: "pulse:mic.monitor",
            outputDevice: "pulse:spk", periodFrames: 960, periodCount: 4)

        let oneClock = try IOUnit(configuration)
        #expect(!(try oneClock.start()).independentClocks, "two PCMs of a sound server are one clock by default")
        oneClock.stop()

        configuration.clocks = .two
        let io = try IOUnit(configuration)
        let graph = try RenderGraph(format: format, maximumFrames: 4096)
        try graph.connect(try graph.addNode(try io.inputUnit()), to: graph.output)
        try io.setOutputGraph(graph)
        let grant = try io.start()
        let file = dir.file("tone.wav")
        // Driven from a thread of its own (see the capture test): 15 s to settle, then the tone, recorded.
        let ratios = try await offPool { () -> [Double] in
            let deadline = Date().addingTimeInterval(60)
            while io.sampleTime < 15 * 48_000, Date() < deadline { usleep(10_000) }
            let recorder = try pulse.record("spk", to: dir.file("spk.wav"))
            let player = try pulse.play(file, to: "mic")
            var seen: [Double] = []
            let end = io.sampleTime + 5 * 48_000
            while io.sampleTime < end, Date() < deadline {
                usleep(20_000)
                seen.append(io.clockRatio ?? 0)
            }
            player.wait(timeout: 15)
            recorder.stop(signal: SIGINT)
            return seen
        }
        print("two clocks through PulseAudio: tracked ratio \(ratios.min() ?? 0) … \(ratios.max() ?? 0)")
        let shortfalls = io.clockShortfalls
        let resyncs = io.clockResyncs
        let latency = io.clockBridgeLatency
        let xruns = io.xrunCount
        io.stop()
        let warnings = await warningsUntilStopped(io)
        #expect(grant.independentClocks && grant.description.contains("two clocks"))
        #expect(warnings.contains { $0.contains("two clocks") }, "\(warnings)")
        #expect(shortfalls == 0)
        #expect(resyncs == 0, "the sound server's bursts are not taken for a stopped side")
        #expect(xruns == 0)
        #expect(ratios.allSatisfy { abs($0 - 1) < 2e-3 }, "tracked \(ratios.min() ?? 0) … \(ratios.max() ?? 0)")
        // The bridge's FIFO aims at two periods; its converter adds about 5 ms.
        #expect(latency >= 1920 / 48_000 && latency < 1920 / 48_000 + 0.01, "bridge latency \(latency) s")

        let recorded = try FFmpeg.decode(dir.file("spk.wav"), channels: 2)[0]
        // The tone's middle two seconds, wherever it landed.
        let first = try #require(recorded.firstIndex { abs($0) > 0.2 }, "the tone came out")
        try #require(recorded.count >= first + 3 * 48_000, "\(recorded.count) frames recorded")
        let part = Array(recorded[(first + 24_000)..<(first + 24_000 + 96_000)])
        var crossings: [Double] = []
        for i in 1..<part.count where part[i - 1] < 0 && part[i] >= 0 {
            crossings.append(Double(i - 1) + Double(-part[i - 1] / (part[i] - part[i - 1])))
        }
        let f = Double(crossings.count - 1) / (crossings.last! - crossings.first!) * 48_000
        #expect(abs(f - 1_000) < 1, "\(f) Hz")
        let rms = (part.reduce(0) { $0 + Double($1) * Double($1) } / Double(part.count)).squareRoot()
        #expect(abs(20 * log10(rms * 2.0.squareRoot() / 0.25)) < 0.1, "level \(rms * 2.0.squareRoot())")
        var step: Float = 0
        for i in 2..<part.count { step = max(step, abs(part[i] - 2 * part[i - 1] + part[i - 2])) }
        #expect(step < 0.006, "a glitch: second difference \(step)")
    }

    /// Round trip through PulseAudio (play into "spk", capture "spk.monitor"): found, and at least the device's
    /// own buffering (capture period + playback buffer) but well under a second.
    @Test func measuresTheRoundTrip() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["spk"])
        defer { pulse.stop() }
        pulse.exportToThisProcess()
        try pulse.keepMonitorAlive("spk")
        let m = try await offPool {
            try LatencyMeter.measure(
                IOUnit.Configuration(
                    backend: .alsa, inputDevice: "pulse:spk.monitor", outputDevice: "pulse:spk", periodFrames: 960,
                    periodCount: 3),
                clicks: 3)
        }
        #expect(m.roundTripFrames.count == 3)
        #expect(m.medianFrames >= 960, "at least one period")
        #expect(m.milliseconds < 500)
        #expect(m.confidences.allSatisfy { $0 > 0.9 })
    }
}

/// Sleeps once, on the n-th call.
final class StallOnce: @unchecked Sendable {
    private var calls = 0
    private let atCycle: Int
    private let microseconds: UInt32
    init(atCycle: Int, microseconds: UInt32) {
        self.atCycle = atCycle
        self.microseconds = microseconds
    }
    /// The largest jump in sample time between consecutive cycles beyond their frames.
    private(set) var largestGap: Int64 = 0
    private var next: Int64?
    func tick(sampleTime: Int64 = 0, frames: Int = 0) {
        calls += 1
        if let next { largestGap = max(largestGap, sampleTime - next) }
        next = sampleTime + Int64(frames)
        if calls == atCycle { usleep(microseconds) }
    }
}

/// Through a real JACK server with the dummy driver (started by each test, stopped by PID).
@Suite(.serialized) struct JACKDeviceTests {
    /// Our output port looped back to our input port: the measured round trip is the theoretical one period.
    @Test(arguments: [1024, 256]) func loopbackRoundTripIsOnePeriod(period: Int) async throws {
        let jack = try await JACKServer.started(periodFrames: period)
        defer { jack.stop() }
        let server = jack.name
        let m: LatencyMeasurement
        do {
            m = try await offPool {
                try LatencyMeter.measure(
                    IOUnit.Configuration(backend: .jack, inputDevice: "self", outputDevice: "self", jackServer: server),
                    clicks: 3)
            }
        } catch {
            // What the server saw (xruns, a client it dropped) is the first thing to read; it is gone after stop().
            print("loopback at \(period) frames failed; the server's log:\n\(jack.output)")
            throw error
        }
        #expect(m.grant.periodFrames == period)
        #expect(abs(m.medianFrames - period) <= period, "theoretical: one period; measured \(m.medianFrames)")
        #expect(m.roundTripFrames.allSatisfy { $0 == m.medianFrames }, "the JACK graph is sample-exact")
    }

    /// The capture's host times are on CLOCK_MONOTONIC, like every other backend's: each cycle's input host time
    /// lies one period (the capture's duration) and a little scheduling before the moment the handler runs. JACK's
    /// own clock is CLOCK_MONOTONIC_RAW in jackd2 on Linux; taken as it was, host times were off by the two clocks'
    /// difference (247 ms on a machine up for a while, where this test failed; on a fresh boot it is near 0).
    @Test func captureHostTimesAreOnTheMonotonicClock() async throws {
        let jack = try await JACKServer.started(periodFrames: 256)
        defer { jack.stop() }
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
        let io = try IOUnit(
            IOUnit.Configuration(backend: .jack, inputFormat: format, inputDevice: "system", jackServer: jack.name))
        // Each cycle's age (now − its input host time) on the device thread, into storage made beforehand; read
        // after stop(), which waits for the thread.
        let capacity = 1000
        let ages = UnsafeMutablePointer<Int64>.allocate(capacity: capacity)
        defer { ages.deallocate() }
        let count = Atomic<Int>(0)
        nonisolated(unsafe) let storage = ages
        try io.setCaptureHandler { _, stamp in
            let i = count.load(ordering: .relaxed)
            guard i < capacity else { return }
            storage[i] = Int64(bitPattern: monotonicNanoseconds()) - Int64(bitPattern: stamp.hostTime)
            count.store(i + 1, ordering: .relaxed)
        }
        _ = try io.start()
        try await withTimeLimit(30, "a second of capture") {
            while io.sampleTime < 48_000 { try await Task.sleep(nanoseconds: 10_000_000) }
        }
        io.stop()
        let n = count.load(ordering: .relaxed)
        try #require(n >= 100, "\(n) cycles")
        // JACK's cycle time is its clock's prediction of the wake-up, so single cycles stray; the median does not.
        let median = Array(UnsafeBufferPointer(start: ages, count: n)).sorted()[n / 2]
        let period = Int64(256.0 / 48_000 * 1e9)
        #expect(abs(median - period) <= 10_000_000, "captures stamped \(median) ns before their handler ran (one period: \(period) ns)")
    }

    /// Capture and playback ports carry audio exactly: what the output callback plays comes back on the input,
    /// one period later, bit for bit.
    @Test func portsCarryAudioExactly() async throws {
        let jack = try await JACKServer.started(periodFrames: 1024)
        defer { jack.stop() }
        let signal = SignalCheck.testSignal(seconds: 1)
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        let graph = try RenderGraph(format: format, maximumFrames: 4096)
        let player = try BufferPlayerUnit(buffer: PCMBuffer(channels: signal), sampleRate: 48_000, loop: false)
        try graph.connect(try graph.addNode(player, name: "player"), to: graph.output)
        let io = try IOUnit(
            IOUnit.Configuration(
                backend: .jack, inputFormat: format, outputFormat: format, inputDevice: "self", outputDevice: "self",
                jackServer: jack.name))
        try io.setOutputGraph(graph)
        let tape = Tape(frames: 60_000, channels: 2)
        try io.setCaptureHandler { raw, stamp in tape.store(raw, at: stamp.sampleTime) }
        let grant = try io.start()
        while io.sampleTime < 56_000 { try await Task.sleep(nanoseconds: 10_000_000) }
        io.stop()
        #expect(grant.periodFrames == 1024 && grant.deviceSampleType == .float32)
        for c in 0..<2 {
            #expect(Array(tape.channels[c][1024..<(1024 + 48_000)]) == signal[c])
        }
    }

    /// A 48 kHz client on a JACK server running at 44.1 kHz, its output looped back to its input: the unit opens
    /// at the server's rate (the grant says 44.1 kHz, a warning says it converts), and what comes back at 48 kHz is
    /// what was played — a 1 kHz tone at its level, clean to −70 dB — and a click comes back one JACK period plus
    /// the reported conversion latency later, within 1 ms. No client cycle finds the capture short.
    @Test func aClientAtAnotherRateIsConverted() async throws {
        let jack = try await JACKServer.started(periodFrames: 512, sampleRate: 44_100)
        defer { jack.stop() }
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
        var signal = (0..<144_000).map { Float(0.25 * sin(2 * .pi * 1_000 * Double($0) / 48_000)) }
        for i in 0..<48_000 { signal[i] = 0 }
        signal[24_000] = 0.9  // the click, in silence
        let graph = try RenderGraph(format: format, maximumFrames: 4096)
        let player = try BufferPlayerUnit(buffer: PCMBuffer(channels: [signal]), sampleRate: 48_000, loop: false)
        try graph.connect(try graph.addNode(player, name: "player"), to: graph.output)
        let io = try IOUnit(
            IOUnit.Configuration(
                backend: .jack, inputFormat: format, outputFormat: format, inputDevice: "self", outputDevice: "self",
                jackServer: jack.name))
        try io.setOutputGraph(graph)
        let tape = Tape(frames: 160_000, channels: 1)
        try io.setCaptureHandler { raw, stamp in tape.store(raw, at: stamp.sampleTime) }
        let grant = try io.start()
        let latency = io.conversionLatency
        try await Task.sleep(nanoseconds: 300_000_000)
        let shortAtStart = io.conversionShortfalls
        // Sample time counts the device's frames: 44.1 kHz.
        while io.sampleTime < 144_000 * 441 / 480 + 4_410 { try await Task.sleep(nanoseconds: 10_000_000) }
        let shortAtEnd = io.conversionShortfalls
        io.stop()
        let warnings = await warningsUntilStopped(io)
        #expect(grant.sampleRate == 44_100)
        #expect(warnings.contains { $0.contains("44.1 kHz") && $0.contains("converting") }, "\(warnings)")
        #expect(latency > 0 && latency < 0.06, "\(latency) s")  // high quality: about 41 ms
        #expect(shortAtStart == 0 && shortAtEnd == 0, "client cycles that found the capture short: \(shortAtStart), \(shortAtEnd)")
        let back = tape.channels[0]
        // The click: where it comes back, against one period plus the conversion's latency.
        let peak = (20_000..<40_000).max { abs(back[$0]) < abs(back[$1]) }!
        let expected = 24_000 + Double(512) * 48_000 / 44_100 + latency * 48_000
        #expect(abs(Double(peak) - expected) <= 48, "the click came back at \(peak), expected \(expected)")
        // The tone: frequency, level, and what is left after the best-fitting sine.
        let start = 80_000
        let part = Array(back[start..<(start + 48_000)])
        var s = 0.0
        var c = 0.0
        for (i, v) in part.enumerated() {
            let phase = 2 * Double.pi * 1_000 * Double(i) / 48_000
            s += Double(v) * sin(phase)
            c += Double(v) * cos(phase)
        }
        let a = 2 * s / Double(part.count)
        let b = 2 * c / Double(part.count)
        let amplitude = (a * a + b * b).squareRoot()
        var residual = 0.0
        for (i, v) in part.enumerated() {
            let phase = 2 * Double.pi * 1_000 * Double(i) / 48_000
            let e = Double(v) - (a * sin(phase) + b * cos(phase))
            residual += e * e
        }
        let rms = (residual / Double(part.count)).squareRoot()
        #expect(abs(20 * log10(amplitude / 0.25)) < 0.05, "level \(amplitude)")
        #expect(20 * log10(rms / (amplitude / 2.0.squareRoot())) < -70, "residual \(20 * log10(rms / (amplitude / 2.0.squareRoot()))) dB")

        // The latency meter on the same loop counts the client's 48 kHz frames and says the device's rate: one
        // JACK period plus the conversion, within a millisecond.
        let m = try await offPool {
            try LatencyMeter.measure(
                IOUnit.Configuration(backend: .jack, inputDevice: "self", outputDevice: "self", jackServer: jack.name),
                clicks: 3)
        }
        #expect(m.sampleRate == 48_000 && m.grant.sampleRate == 44_100)
        #expect(m.description.contains("the device at 44.1 kHz converted"), "\(m)")
        let expectedMilliseconds = 512 / 44.1 + latency * 1000
        #expect(abs(m.milliseconds - expectedMilliseconds) < 1, "\(m), expected \(expectedMilliseconds) ms")
    }

    /// The JACK server killed (SIGKILL, as a crash) while the unit plays a tone into its own input: a fault
    /// event, failed reconnect attempts while the server is away, then — once a server of the same name is back
    /// — the unit reconnects by itself, the tone comes back on the input, and sample time has moved on by the gap.
    @Test func reconnectsWhenTheServerComesBack() async throws {
        let jack = try await JACKServer.started(periodFrames: 512)
        defer { jack.stop() }
        let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
        let graph = try RenderGraph(format: format, maximumFrames: 4096)
        try graph.connect(try graph.addNode(ToneUnit(format: format, frequency: 1000, amplitude: 0.25)), to: graph.output)
        let io = try IOUnit(
            IOUnit.Configuration(
                backend: .jack, inputFormat: format, outputFormat: format, inputDevice: "self", outputDevice: "self",
                reconnect: true, jackServer: jack.name))
        try io.setOutputGraph(graph)
        let tape = Tape(frames: 48_000 * 40, channels: 1)
        // Each cycle's sample time and when it came: where the new stream's first cycle was put, against the clock.
        let cycles = Mutex<[(sampleTime: Int64, at: UInt64)]>([])
        try io.setCaptureHandler { raw, stamp in
            tape.store(raw, at: stamp.sampleTime)
            let now = monotonicNanoseconds()
            cycles.withLock { $0.append((stamp.sampleTime + Int64(raw.frameCount), now)) }
        }
        try io.start()
        let (killedAt, resumedAt, killedClock) = try await offPool { () throws -> (Int64, Int64, UInt64) in
            func wait(_ what: String, seconds: Double, until ready: () -> Bool) throws {
                let deadline = Date().addingTimeInterval(seconds)
                while !ready() {
                    guard Date() < deadline else { throw SoundServerError("timed out waiting for \(what)") }
                    usleep(5_000)
                }
            }
            try wait("a second of audio", seconds: 10) { io.sampleTime >= 48_000 }
            let killedAt = io.sampleTime
            let killedClock = monotonicNanoseconds()
            jack.kill()
            try wait("the fault", seconds: 10) { io.faultCount == 1 }
            usleep(500_000)  // away for a while: reconnect attempts fail
            try jack.start()
            try wait("the reconnect", seconds: 20) { io.reconnectCount == 1 }
            // The new stream's first cycle places the sample time (the reopening only estimates it).
            let reopened = io.cycleCount
            try wait("the new stream's first cycles", seconds: 10) { io.cycleCount >= reopened + 2 }
            let resumedAt = io.sampleTime
            try wait("a second after the reconnect", seconds: 10) { io.sampleTime >= resumedAt + 48_000 }
            return (killedAt, resumedAt, killedClock)
        }
        io.stop()
        let stream = io.events
        let events = try await withTimeLimit(30, "the stopped event") { () async -> [DeviceEvent] in
            var events: [DeviceEvent] = []
            for await e in stream {
                events.append(e)
                if case .stopped = e { break }
            }
            return events
        }
        #expect(events.contains { if case .fault(let e) = $0 { e.code == .deviceUnavailable } else { false } }, "\(events)")
        #expect(events.contains { if case .reconnectFailed = $0 { true } else { false } }, "\(events)")
        let gaps = events.compactMap { if case .reconnected(_, let gap) = $0 { gap } else { nil } }
        // One reconnect; or two, when the server took the capture client while it could not take the output's yet
        // (a loaded machine, the server still starting): capture went on alone — said in a warning — and the output
        // followed at the next look. Anything more is a supervisor that does not settle.
        let outputAway = events.contains { if case .warning(let w) = $0 { w.contains("the output device is away") } else { false } }
        #expect(gaps.count == 1 || (gaps.count == 2 && outputAway), "\(events)")
        let gap = try #require(gaps.first)
        #expect(gap >= 24_000, "the server was away at least half a second: \(gap) frames")
        #expect(resumedAt >= killedAt + gap, "sample time moved on by the gap")
        // Sample time follows the clock across the outage: the new stream's first cycle (the first past the gap) ends
        // where the time that passed says, within two periods and the polling of the kill (after it, the dummy
        // driver's own clock runs the stream, and under load it catches up in bursts).
        let first = try #require(cycles.withLock { $0.first { $0.sampleTime > killedAt + 24_000 } })
        let clockDrift = Double(first.sampleTime - killedAt) / 48_000 - Double(first.at - killedClock) / 1e9
        #expect(abs(clockDrift) < 0.05, "sample time and the clock parted by \(clockDrift) s across the outage")
        // The tone, before the kill and after the reconnect (one period of loopback delay, then the tone).
        let before = tape.channels[0][Int(killedAt) - 24_000..<Int(killedAt)]
        let after = tape.channels[0][Int(resumedAt) + 12_000..<Int(resumedAt) + 36_000]
        #expect(abs(SignalCheck.toneAmplitude(before, frequency: 1000) - 0.25) < 0.01)
        #expect(abs(SignalCheck.toneAmplitude(after, frequency: 1000) - 0.25) < 0.01)
    }

    /// With no server: a clear error, at once; a rate the server does not run at: a clear error.
    @Test func clearErrors() async throws {
        let mono = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
        let none = try IOUnit(IOUnit.Configuration(backend: .jack, outputFormat: mono, jackServer: "liveaudio-no-such-server"))
        #expect {
            try none.start()
        } throws: { error in
            (error as? AudioError)?.code == .deviceUnavailable
                && (error as? AudioError)?.message.contains("is jackd running") == true
        }
        let jack = try await JACKServer.started(periodFrames: 1024)
        defer { jack.stop() }
        let other = try StreamFormat.graph(sampleRate: 44_100, channelCount: 1)
        var strict = IOUnit.Configuration(backend: .jack, outputFormat: other, jackServer: jack.name)
        strict.convertsRates = false
        let wrongRate = try IOUnit(strict)
        #expect {
            try wrongRate.start()
        } throws: { error in
            (error as? AudioError)?.code == .unsupportedSampleRate
                && (error as? AudioError)?.message.contains("runs at 48 kHz") == true
        }
        let unknown = try IOUnit(IOUnit.Configuration(backend: .jack, outputFormat: mono, outputDevice: "nobody", jackServer: jack.name))
        #expect {
            try unknown.start()
        } throws: { error in
            (error as? AudioError)?.code == .unknownDevice && (error as? AudioError)?.message.contains("system") == true
        }
        let devices = try AudioDevices.list(.jack, jackServer: jack.name)
        #expect(devices.contains { $0.name == "system" && $0.isDefault && $0.directions == .duplex })
    }
}

/// Captured audio indexed by sample time, written on the real-time thread, read after the device stopped.
final class Tape: @unchecked Sendable {
    private let storage: [UnsafeMutablePointer<Float>]
    private let frames: Int

    init(frames: Int, channels: Int) {
        self.frames = frames
        storage = (0..<channels).map { _ in
            let p = UnsafeMutablePointer<Float>.allocate(capacity: frames)
            p.initialize(repeating: 0, count: frames)
            return p
        }
    }

    deinit { storage.forEach { $0.deallocate() } }

    /// Stores a Float32 non-interleaved buffer.
    func store(_ raw: RawBufferView, at sampleTime: Int64) {
        for c in 0..<storage.count {
            let source = raw.plane(c).assumingMemoryBound(to: Float.self)
            for i in 0..<raw.frameCount {
                let t = Int(sampleTime) + i
                if t >= 0 && t < frames { storage[c][t] = source[i] }
            }
        }
    }

    var channels: [[Float]] { storage.map { Array(UnsafeBufferPointer(start: $0, count: frames)) } }
}
