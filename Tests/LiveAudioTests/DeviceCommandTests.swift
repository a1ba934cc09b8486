import Foundation
import LiveAudio
import Testing
import TestSupport

/// The device commands run as a user runs them, against real servers started by each test.
@Suite(.serialized) struct DeviceCommandTests {
    var liveaudio: String { productsDirectory + "/liveaudio" }

    /// `devices` lists ALSA's PCMs with direction and the default, and a JACK server's clients.
    @Test func listsDevices() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["spk"])
        defer { pulse.stop() }
        let alsa = try await runTool(liveaudio, ["devices", "--backend", "alsa"], environment: pulse.environment)
        #expect(alsa.status == 0, "\(alsa.stderr)")
        #expect(alsa.stdout.contains("default") && alsa.stdout.contains("input+output") && alsa.stdout.contains("pulse"))
        let jack = try await JACKServer.started(periodFrames: 1024)
        defer { jack.stop() }
        let j = try await runTool(liveaudio, ["devices", "--backend", "jack", "--jack-server", jack.name])
        #expect(j.status == 0, "\(j.stderr)")
        #expect(j.stdout.contains("system") && j.stdout.contains("default"))
    }

    /// An unknown device: exit status 1, a message listing the devices there are, no file left behind.
    @Test func unknownDeviceIsAnErrorListingDevices() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["spk"])
        defer { pulse.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let r = try await runTool(
            liveaudio, ["record", "-o", dir.file("x.wav"), "--device", "nosuch", "--duration", "1"],
            environment: pulse.environment)
        #expect(r.status == 1)
        #expect(r.stderr.contains("no alsa device 'nosuch'") && r.stderr.contains("default (input+output)"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("x.wav")))
    }

    /// `monitor --status-interval` takes 0.1 … 86400 seconds; anything else is refused before a device opens, with
    /// the range in the message.
    @Test(arguments: ["0", "0.05", "-1", "86401", "nan"]) func statusIntervalOutOfRangeIsRefused(value: String) async throws {
        let r = try await runTool(
            liveaudio, ["monitor", "--backend", "virtual", "--input", "/nonexistent/in.wav", "--status-interval=\(value)"])
        #expect(r.status == 1, "\(value): \(r.stderr)")
        #expect(r.stderr.contains("--status-interval takes 0.1 … 86400 seconds"), "\(value): \(r.stderr)")
    }

    /// `--clocks` takes auto, one or two; anything else is refused before a device opens. `monitor --clocks two`
    /// says the clocks are two and puts the bridge's latency in the round trip it expects.
    @Test func monitorOnTwoClocks() async throws {
        let r = try await runTool(liveaudio, ["monitor", "--clocks", "three", "--duration", "1"])
        #expect(r.status == 1)
        #expect(r.stderr.contains("--clocks must be auto, one or two, got 'three'"), "\(r.stderr)")
        let pulse = try await PulseAudioServer.started(sinks: ["mic", "spk"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("mic")
        let two = try await runTool(
            liveaudio,
            ["monitor", "--input", "pulse:mic.monitor", "--output", "pulse:spk", "--clocks", "two", "--duration", "2"],
            environment: pulse.environment)
        #expect(two.status == 0, "\(two.stderr)")
        #expect(two.stderr.contains("two clocks") && two.stderr.contains("+ clock bridge"), "\(two.stderr)")
    }

    /// The sound server is killed while `record` runs: an error event, a WAV that is valid up to that point (read
    /// while the server is down), and when the server is back the recording resumes — with silence for the time
    /// it was away, so the file stays aligned to the clock.
    @Test func recordSurvivesTheServerDying() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["mic"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("mic")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let tone = (0..<(48_000 * 40)).map { Float(0.3 * sin(2 * Double.pi * 440 * Double($0) / 48_000)) }
        try writeWAV(dir.file("tone.wav"), channels: [tone], sampleType: .int16)
        _ = try pulse.play(dir.file("tone.wav"), to: "mic")
        let recorder = try ChildProcess(
            liveaudio,
            ["record", "-o", dir.file("rec.wav"), "--device", "pulse:mic.monitor", "--duration", "30", "--period", "960"],
            environment: pulse.environment, log: dir.file("record.log"))
        defer { recorder.stop() }
        // Until a second and a half is on disk (a new capture stream can take a second to get going).
        let deadline = Date().addingTimeInterval(15)
        while (try? WAVFileReader.info(path: dir.file("rec.wav")).frameCount) ?? 0 < 72_000, Date() < deadline {
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        pulse.kill()
        try await Task.sleep(nanoseconds: 1_500_000_000)
        // While the server is down: the file is a valid WAV holding what was recorded.
        let during = try WAVFileReader.info(path: dir.file("rec.wav"))
        #expect(during.frameCount >= 48_000, "\(during.frameCount) frames so far")
        let early = try FFmpeg.decode(dir.file("rec.wav"), channels: 1)[0]
        try #require(early.count >= 48_000)
        #expect(SignalCheck.toneAmplitude(early[(early.count - 24_000)..<(early.count - 4800)], frequency: 440) > 0.2)
        try await pulse.restart()
        _ = try pulse.play(dir.file("tone.wav"), to: "mic")
        let status = await recorder.finished(timeout: 45)
        let log = recorder.output
        #expect(status == 0, "\(log)")
        #expect(log.contains("device fault"), "\(log)")
        #expect(log.contains("reconnected"), "\(log)")
        #expect(log.contains("of silence where the device was away"), "\(log)")
        let recorded = try FFmpeg.decode(dir.file("rec.wav"), channels: 1)[0]
        try #require(recorded.count == 30 * 48_000)
        // The tone is there again at the end. 30 s leave room for the outage, a server restart (which has taken
        // more than 10 s while every suite of the phase started servers: with 16 s, the reconnect came too late
        // for the last second to hold the tone), the reconnect backoff and a new capture stream's slow start.
        #expect(SignalCheck.toneAmplitude(recorded[(29 * 48_000)..<(30 * 48_000 - 4800)], frequency: 440) > 0.2)
    }

    /// With `--no-reconnect`, the server dying ends the recording at once: exit status 1, a clear message, and
    /// the WAV holds what came before — no waiting for a device that will not come back.
    @Test func recordWithoutReconnectEndsOnAFault() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["mic"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("mic")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let recorder = try ChildProcess(
            liveaudio,
            ["record", "-o", dir.file("rec.wav"), "--device", "pulse:mic.monitor", "--duration", "60", "--no-reconnect"],
            environment: pulse.environment, log: dir.file("record.log"))
        defer { recorder.stop() }
        let deadline = Date().addingTimeInterval(15)
        while (try? WAVFileReader.info(path: dir.file("rec.wav")).frameCount) ?? 0 < 24_000, Date() < deadline {
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        pulse.kill()
        let killed = Date()
        let status = await recorder.finished(timeout: 20)
        #expect(Date().timeIntervalSince(killed) < 10, "it ended instead of waiting")
        #expect(status == 1, "\(recorder.output)")
        #expect(recorder.output.contains("device fault") && recorder.output.contains("holds what came before"), "\(recorder.output)")
        #expect(try WAVFileReader.info(path: dir.file("rec.wav")).frameCount >= 24_000)
    }

    /// The server is killed 2.5 s into `record --duration 12` and stays dead: `--duration` bounds the recording on
    /// the clock, so the command ends soon after 12 s (plus the device's start-up grace) with an error, and the WAV
    /// is valid up to the fault.
    @Test func recordDurationIsAClockBoundWhenTheServerStaysDead() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["mic"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("mic")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let started = Date()
        let recorder = try ChildProcess(
            liveaudio, ["record", "-o", dir.file("rec.wav"), "--device", "pulse:mic.monitor", "--duration", "12"],
            environment: pulse.environment, log: dir.file("record.log"))
        defer { recorder.stop(signal: SIGKILL) }
        // On a thread of its own: a test task waiting its turn on a busy cooperative pool once killed the server
        // only after the whole recording was done.
        try await offPool {
            let deadline = Date().addingTimeInterval(15)
            while (try? WAVFileReader.info(path: dir.file("rec.wav")).frameCount) ?? 0 < 48_000, Date() < deadline {
                usleep(20_000)
            }
            usleep(1_500_000)
            pulse.kill()
        }
        // 12 s plus the grace (3 s and the device buffer) from the grant, which comes a moment after the start;
        // 24 s leaves room for a loaded machine and still fails a recording that waits for the 30 s reconnect
        // timeout.
        let status = await recorder.finished(timeout: 40)
        let took = Date().timeIntervalSince(started)
        let log = recorder.output
        #expect(took < 24, "ended \(took) s after the start: \(log)")
        #expect(status == 1, "\(log)")
        #expect(log.contains("device fault") && log.contains("the device was away when the 12 s were up"), "\(log)")
        #expect(log.contains("holds what came before"), "\(log)")
        let frames = try WAVFileReader.info(path: dir.file("rec.wav")).frameCount
        #expect(frames >= 48_000 && frames < 12 * 48_000, "\(frames) frames")
        let check = try runProcess("ffmpeg", ["-v", "error", "-i", dir.file("rec.wav"), "-f", "null", "-"])
        #expect(check.status == 0 && check.stderr.isEmpty, "\(check.stderr)")
    }

    /// Every device command gives up reconnecting after `--reconnect-timeout` seconds with the server dead:
    /// exit status 1 and a message naming the timeout, instead of retrying for ever.
    @Test(arguments: ["record", "monitor", "play", "stream"])
    func reconnectingGivesUpAfterTheTimeout(command: String) async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["mic", "spk"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("mic")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let long = (0..<(48_000 * 60)).map { Float(0.2 * sin(2 * Double.pi * 440 * Double($0) / 48_000)) }
        try writeWAV(dir.file("long.wav"), channels: [long], sampleType: .int16)
        let arguments: [String] =
            switch command {
            case "record": ["record", "-o", dir.file("rec.wav"), "--device", "pulse:mic.monitor"]
            case "monitor": ["monitor", "--input", "pulse:mic.monitor", "--output", "pulse:spk"]
            case "play": ["play", dir.file("long.wav"), "--device", "pulse:spk"]
            default: ["stream", "--input", "pulse:mic.monitor", "--backend", "alsa", "--to", dir.file("out.flv")]
            }
        let child = try ChildProcess(
            liveaudio, arguments + ["--reconnect-timeout", "2"], environment: pulse.environment, log: dir.file("log.txt"))
        defer { child.stop(signal: SIGKILL) }
        // Running: give the device time to start (a new stream on a null sink may take over a second).
        try await Task.sleep(nanoseconds: 3_000_000_000)
        #expect(child.isRunning, "\(child.output)")
        pulse.kill()
        let killed = Date()
        let status = await child.finished(timeout: 40)
        let took = Date().timeIntervalSince(killed)
        let log = child.output
        // The fault is seen within the driver's stall limit (about 1 s), then 2 s of attempts.
        #expect(took < 15, "ended \(took) s after the kill: \(log)")
        #expect(status == 1, "\(log)")
        #expect(log.contains("did not come back within 2 s"), "\(log)")
        if command == "record" {
            #expect(try WAVFileReader.info(path: dir.file("rec.wav")).frameCount >= 48_000)
        }
        if command == "stream" {
            let check = try runProcess("ffmpeg", ["-v", "error", "-i", dir.file("out.flv"), "-f", "null", "-"])
            #expect(check.status == 0, "the FLV is playable up to the fault: \(check.stderr)")
        }
    }

    /// `monitor`'s defaults aim at ear monitoring: it asks for 256-frame periods, prints the round trip it expects
    /// (the device buffering plus the voice chain's 3 ms of limiter lookahead) well under the 50 ms bound, and
    /// moves up the buffering only when xruns repeat.
    @Test func monitorDefaultsToLowLatency() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["mic", "spk"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("mic")
        try pulse.keepMonitorAlive("spk")
        let r = try await runTool(
            liveaudio,
            ["monitor", "--input", "pulse:mic.monitor", "--output", "pulse:spk", "--graph", "Examples/graphs/voice-chain.json",
             "--duration", "4"],
            environment: pulse.environment)
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stderr.split(separator: "\n").filter { $0.contains("expected round trip") }
        let first = try #require(lines.first, "\(r.stderr)")
        #expect(first.contains("256 frames"), "the first try is 256-frame periods: \(first)")
        #expect(first.contains("+ graph 3.00 ms"), "the limiter's 3 ms lookahead: \(first)")
        for line in lines {
            let figures = line.split(separator: " ").compactMap { Double($0) }
            // "expected round trip R ms (device buffering D ms + graph G ms)": R = D + G, and R < 50.
            try #require(figures.count >= 3, "\(line)")
            let (total, device, graph) = (figures[figures.count - 3], figures[figures.count - 2], figures[figures.count - 1])
            #expect(abs(total - device - graph) < 0.011 && total < 50, "\(line)")
        }
        #expect(r.stdout.contains("buffering 256 × ") || r.stdout.contains("buffering 512 × "), "\(r.stdout)")
    }

    /// `monitor --voice-processing` puts the voiceProcessing unit on the microphone: the round trip it expects
    /// counts the unit's 23.96 ms, and at the end it says what the unit measured. `--noise-suppression` and
    /// `--gain-control` take the unit's names (any case) and need `--voice-processing`; a wrong one is refused
    /// before a device opens.
    @Test func monitorWithVoiceProcessing() async throws {
        let alone = try await runTool(liveaudio, ["monitor", "--noise-suppression", "high", "--duration", "1"])
        #expect(alone.status == 1)
        #expect(alone.stderr.contains("--noise-suppression sets up voice processing: add --voice-processing"), "\(alone.stderr)")
        let wrong = try await runTool(liveaudio, ["monitor", "--voice-processing", "--gain-control", "loud", "--duration", "1"])
        #expect(wrong.status == 1)
        #expect(wrong.stderr.contains("--gain-control takes off, adaptiveDigital, fixedDigital, not 'loud'"), "\(wrong.stderr)")
        let rate = try await runTool(liveaudio, ["monitor", "--voice-processing", "--rate", "44100", "--duration", "1"])
        #expect(rate.status == 1)
        #expect(rate.stderr.contains("--voice-processing runs at 8000, 16000, 32000 or 48000 Hz, not 44.1 kHz: give --rate one of those"), "\(rate.stderr)")

        let pulse = try await PulseAudioServer.started(sinks: ["mic", "spk"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("mic")
        let r = try await runTool(
            liveaudio,
            ["monitor", "--input", "pulse:mic.monitor", "--output", "pulse:spk", "--voice-processing",
             "--noise-suppression", "veryhigh", "--gain-control", "fixedDigital", "--duration", "3"],
            environment: pulse.environment)
        #expect(r.status == 0, "\(r.stderr)")
        let line = try #require(r.stderr.split(separator: "\n").first { $0.contains("expected round trip") }, "\(r.stderr)")
        #expect(line.contains("+ voice processing "), "\(line)")
        let figures = line.split(separator: " ").compactMap { Double($0) }
        try #require(figures.count >= 4, "\(line)")
        let (total, device, graph, voice) = (
            figures[figures.count - 4], figures[figures.count - 3], figures[figures.count - 2], figures[figures.count - 1]
        )
        #expect(abs(total - device - graph - voice) < 0.011, "\(line)")
        // The unit's 23.96 ms, and in real time a period and 5 ms more for its worker (the period is in the line).
        let period = try #require(line.split(separator: " ").firstIndex(of: "frames").map { Double(line.split(separator: " ")[$0 - 1])! })
        #expect(abs(voice - (23.96 + (period + 240) / 48)) < 0.011, "\(line)")
        #expect(r.stdout.contains("voice processing: echo return loss enhancement"), "\(r.stdout)")
    }

    /// `monitor` with a graph: microphone → −6 dB gain → low-pass at 1 kHz → speaker, through PulseAudio.
    /// A 300 Hz tone (passband) comes out at half its amplitude (−6.02 dB, within 0.1 dB of the analytic
    /// Butterworth response, −0.04 dB at 300 Hz); a 6 kHz tone (stopband: −31.1 dB from the second-order
    /// response) is cut by more than 25 dB below the gain.
    @Test func monitorPassesTheSignalThroughTheGraph() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["mic", "spk"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("mic")
        try pulse.keepMonitorAlive("spk")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // The tones play longer than the monitor runs, and start first: however long a busy machine takes to
        // start the monitor, its three seconds fall inside the tone.
        let n = 48_000 * 10
        let low = (0..<n).map { Float(0.2 * sin(2 * Double.pi * 300 * Double($0) / 48_000)) }
        let high = (0..<n).map { Float(0.2 * sin(2 * Double.pi * 6000 * Double($0) / 48_000)) }
        try writeWAV(dir.file("low.wav"), channels: [low, low], sampleType: .float32)
        try writeWAV(dir.file("high.wav"), channels: [high, high], sampleType: .float32)
        let graph = dir.file("monitor.json")
        try """
            {"sampleRate": 48000, "channels": 2,
             "nodes": [{"id": "mic", "type": "input", "channels": 2}, {"id": "trim", "type": "gain", "gain": -6.0206},
                       {"id": "lp", "type": "lowpass", "cutoff": 1000, "resonance": 0}],
             "connections": [{"from": "mic", "to": "trim"}, {"from": "trim", "to": "lp"}, {"from": "lp", "to": "output"}]}
            """.write(toFile: graph, atomically: true, encoding: .utf8)
        var levels: [Double] = []
        for (name, frequency) in [("low", 300.0), ("high", 6000.0)] {
            let recorder = try pulse.record("spk", to: dir.file("out-\(name).wav"))
            let player = try pulse.play(dir.file("\(name).wav"), to: "mic")
            let monitor = try ChildProcess(
                liveaudio,
                ["monitor", "--input", "pulse:mic.monitor", "--output", "pulse:spk", "--graph", graph, "--duration", "3",
                 "--period", "960"],
                environment: pulse.environment, log: dir.file("monitor-\(name).log"))
            let status = await monitor.finished(timeout: 20)
            player.stop(signal: SIGTERM)
            recorder.stop(signal: SIGINT)
            #expect(status == 0, "\(monitor.output)")
            // Two PCMs of one sound server are one clock unless asked.
            #expect(!monitor.output.contains("two clocks"), "\(monitor.output)")
            let out = try FFmpeg.decode(dir.file("out-\(name).wav"), channels: 2)[0]
            // The loudest second of what came out (the monitor passes the tone for its three seconds).
            var best = 0.0
            var start = 0
            while start + 48_000 <= out.count {
                best = max(best, SignalCheck.toneAmplitude(out[start..<(start + 24_000)], frequency: frequency))
                start += 4800
            }
            levels.append(20 * log10(best / 0.2))
        }
        #expect(abs(levels[0] - (-6.0206 - 0.04)) <= 0.1, "300 Hz: \(levels[0]) dB")
        #expect(levels[1] < -6.02 - 25, "6 kHz: \(levels[1]) dB")
    }

    /// `play` takes any format the decoder reads: an MP3 and an M4A played into the virtual speaker come out as
    /// FFmpeg's own decoder gives them, sample for sample over the tone's second, at their own rates.
    @Test func playTakesCompressedFiles() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for (name, rate) in [("tone.mp3", 44_100), ("tone.m4a", 48_000)] {
            try FFmpeg.run(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=\(rate):duration=1", "-ac", "2", "-b:a", "128k", dir.file(name)])
            let play = try await runTool(liveaudio, ["play", dir.file(name), "--backend", "virtual", "--device", dir.file("spk.wav"), "--pace", "fast"])
            #expect(play.status == 0, "\(play.stderr)")
            #expect(play.stderr.contains("\(rate / 1000)"), "\(play.stderr)")
            // The tone's second: both decoders drop the encoder's priming; past it, FFmpeg's command keeps the last
            // frame's padding that the container says to drop (the M4A's edit list), LiveAudio does not.
            let frames = rate
            let reference = try FFmpeg.decode(dir.file(name), channels: 2)
            let played = try FFmpeg.decode(dir.file("spk.wav"), channels: 2)
            for c in 0..<2 {
                #expect(Array(played[c].prefix(frames)) == Array(reference[c].prefix(frames)), "\(name) channel \(c)")
            }
        }
    }

    /// `play` and `record` on the virtual backend: a file played into the virtual speaker and recorded from the
    /// virtual microphone comes back exact; `latency` on JACK with `--device self` reports one period, and
    /// `monitor --timing` reports the cycles' timing.
    @Test func virtualPlayRecordAndJackLatency() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let signal = SignalCheck.testSignal(seconds: 1)
        try writeWAV(dir.file("in.wav"), channels: signal)
        let play = try await runTool(
            liveaudio, ["play", dir.file("in.wav"), "--backend", "virtual", "--device", dir.file("spk.wav"), "--pace", "fast", "--period", "256"])
        #expect(play.status == 0, "\(play.stderr)")
        let played = try FFmpeg.decode(dir.file("spk.wav"), channels: 2)
        #expect(Array(played[0].prefix(48_000)) == signal[0] && Array(played[1].prefix(48_000)) == signal[1])
        // Whole cycles, and no more: the 48000 frames padded to 188 periods of 256.
        #expect(played[0].count == 48_128, "\(played[0].count) frames written")
        // Recording is paced in real time: as fast as possible, the virtual microphone may outrun the file writer
        // on a busy machine, and what overflows the capture ring is counted, not waited for (by design: a real
        // device does not wait either).
        let rec = try await runTool(
            liveaudio, ["record", "-o", dir.file("rec.wav"), "--backend", "virtual", "--device", dir.file("in.wav"),
                        "--channels", "2", "--callback-sizes", "random:1-999:3"])
        #expect(rec.status == 0, "\(rec.stderr)")
        #expect((rec.stdout + rec.stderr).contains("overflows 0"), "\(rec.stdout) \(rec.stderr)")
        let recorded = try FFmpeg.decode(dir.file("rec.wav"), channels: 2)
        #expect(recorded == signal)

        let jack = try await JACKServer.started(periodFrames: 512)
        defer { jack.stop() }
        let lat = try await runTool(liveaudio, ["latency", "--backend", "jack", "--device", "self", "--jack-server", jack.name, "--clicks", "2"])
        #expect(lat.status == 0, "\(lat.stderr)")
        #expect(lat.stdout.contains("frames=512 periods=1.00"), "\(lat.stdout)")
        // `monitor --timing` on the same server: one line of cycle timing after the run, at the server's period.
        let timed = try await runTool(
            liveaudio, ["monitor", "--backend", "jack", "--jack-server", jack.name, "--duration", "1", "--timing"])
        #expect(timed.status == 0, "\(timed.stderr)")
        let line = timed.stdout.split(separator: "\n").first { $0.hasPrefix("cycle timing: ") }
        #expect(line?.contains("cycles of 512 frames (10.67 ms): render p50 ") == true, "\(timed.stdout)")
        #expect(line?.contains("callback jitter p50 ") == true && line?.contains("load p99 ") == true)
        // The device's thread never waited for anything in our cycles (a lock, a disk): the real-time rule, measured.
        #expect(line?.contains("µs; cycles blocked 0, preempted ") == true, "\(timed.stdout)")
    }

    /// A JACK server at 44.1 kHz under commands that run at 48 kHz: `monitor` and `play` run through the rate
    /// conversion instead of failing, say the rate the server granted and that they convert, and `monitor`
    /// counts the conversion in the round trip it expects; `monitor --duration 1` runs one second of the device's
    /// clock.
    @Test func commandsSayTheGrantedRateAndConvert() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let jack = try await JACKServer.started(periodFrames: 512, sampleRate: 44_100)
        defer { jack.stop() }
        let monitor = try await runTool(
            liveaudio, ["monitor", "--backend", "jack", "--jack-server", jack.name, "--duration", "1"])
        #expect(monitor.status == 0, "\(monitor.stderr)")
        #expect(monitor.stderr.contains("44.1 kHz") && monitor.stderr.contains("converting"), "\(monitor.stderr)")
        #expect(monitor.stderr.contains("+ rate conversion "), "\(monitor.stderr)")
        let monitored = monitor.stdout.split(separator: "\n").first { $0.hasPrefix("monitored ") }.map(String.init) ?? ""
        let seconds = Double(monitored.dropFirst("monitored ".count).prefix { $0 != " " }) ?? 0
        #expect(abs(seconds - 1) < 0.03, "\(monitor.stdout)")
        let tone = (0..<48_000).map { Float(0.2 * sin(2 * .pi * 440 * Double($0) / 48_000)) }
        try writeWAV(dir.file("tone.wav"), channels: [tone, tone])
        let play = try await runTool(liveaudio, ["play", dir.file("tone.wav"), "--backend", "jack", "--jack-server", jack.name])
        #expect(play.status == 0, "\(play.stderr)")
        #expect(play.stderr.contains("44.1 kHz") && play.stderr.contains("converting"), "\(play.stderr)")
    }
}
