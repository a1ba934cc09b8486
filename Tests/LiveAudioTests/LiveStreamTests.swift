import Foundation
import LiveAudio
import Testing
import TestSupport

/// A stereo WAV: 440 Hz left, 660 Hz right, each at amplitude 0.25.
func writeTwoTones(_ path: String, seconds: Double) throws {
    let n = Int(seconds * 48_000)
    let left = (0..<n).map { Float(0.25 * sin(2 * Double.pi * 440 * Double($0) / 48_000)) }
    let right = (0..<n).map { Float(0.25 * sin(2 * Double.pi * 660 * Double($0) / 48_000)) }
    try writeWAV(path, channels: [left, right], sampleRate: 48_000, sampleType: .int16)
}

var examplesDirectory: String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Examples/graphs").standardized.path
}

@Suite("Live-stream session", .serialized)
struct LiveStreamTests {
    @Test("One file input, four outputs at once — an RTMP server, FLV, M4A and ADTS: each decodes with ffmpeg, lasts as long as the input and carries its tones")
    func fansOutToEveryOutput() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("in.wav"), seconds: 3)
        var configuration = LiveStreamSession.Configuration(
            input: .file(path: dir.file("in.wav"), realTime: false),
            outputs: [
                try .init(parsing: server.url("fan")), .file(dir.file("out.flv")), .file(dir.file("out.m4a")),
                .file(dir.file("out.aac")),
            ])
        configuration.rtmp.queueMilliseconds = 60_000
        let session = try LiveStreamSession(configuration)
        do {
            try await session.start()
        } catch {
            Issue.record("\(error); nginx log: \(server.log)")
            throw error
        }
        while !session.hasEnded { try await Task.sleep(nanoseconds: 20_000_000) }
        let summary = await session.stop()
        #expect(summary.error == nil)
        server.stop()
        let recorded = try #require(server.recordedFiles(start: 1).first)
        #expect(summary.statistics.seconds == 3)
        // 3 s = 140.6 packets of 1024, plus the priming packet and the flush: 142.
        #expect(summary.statistics.packetsEncoded == 142, "\(summary.statistics)")
        for file in [recorded, dir.file("out.flv"), dir.file("out.m4a"), dir.file("out.aac")] {
            let check = try runProcess("ffmpeg", ["-v", "error", "-i", file, "-f", "null", "-"])
            #expect(check.status == 0 && check.stderr.isEmpty, "\(file): \(check.stderr)")
            let decoded = try FFmpeg.decode(file, channels: 2)
            // The input plus at most the priming and one packet of padding.
            #expect(decoded[0].count >= 144_000 && decoded[0].count <= 144_000 + 2048 + 1024, "\(file): \(decoded[0].count) frames")
            let left = SignalCheck.toneAmplitude(decoded[0][48_000..<96_000], frequency: 440)
            let right = SignalCheck.toneAmplitude(decoded[1][48_000..<96_000], frequency: 660)
            #expect(abs(left - 0.25) < 0.02 && abs(right - 0.25) < 0.02, "\(file): \(left) \(right)")
        }
        let rtmp = try #require(summary.statistics.outputs.first?.rtmp)
        #expect(rtmp.packetsSent == 142 && rtmp.droppedPackets == 0, "\(rtmp)")
    }

    @Test("Volume and mute take effect while streaming, without clicks or gaps in time")
    func volumeAndMute() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("in.wav"), seconds: 3)
        let configuration = LiveStreamSession.Configuration(
            input: .file(path: dir.file("in.wav"), realTime: true), outputs: [.file(dir.file("out.flv"))])
        let session = try LiveStreamSession(configuration)
        try await session.start()
        // Changed from a thread of its own, watching the input's progress: a busy cooperative pool cannot delay it.
        try await offPool {
            func waitFor(_ seconds: Double) {
                while session.statistics.seconds < seconds, !session.hasEnded { usleep(2_000) }
            }
            waitFor(1)
            session.volume = 0.5
            waitFor(2)
            session.isMuted = true
        }
        #expect(session.isMuted && session.volume == 0.5)
        while !session.hasEnded { try await Task.sleep(nanoseconds: 20_000_000) }
        _ = await session.stop()
        let decoded = try FFmpeg.decode(dir.file("out.flv"), channels: 2)
        let priming = 1024
        func level(_ from: Double, _ to: Double) -> Double {
            SignalCheck.toneAmplitude(decoded[0][(priming + Int(from * 48_000))..<(priming + Int(to * 48_000))], frequency: 440)
        }
        // Changes land within a block or two of the request (the file is paced by the clock, checked every 2 ms).
        #expect(abs(level(0.2, 0.9) - 0.25) < 0.02, "\(level(0.2, 0.9))")
        #expect(abs(level(1.2, 1.9) - 0.125) < 0.015, "\(level(1.2, 1.9))")
        #expect(level(2.2, 2.9) < 0.002, "\(level(2.2, 2.9))")
        // Muting keeps time: the whole 3 s is there.
        #expect(decoded[0].count >= 144_000)
    }

    @Test("Meters and live control: the input and output levels read while streaming, and a graph unit found by its id changes the sound at once")
    func metersAndLiveUnits() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("in.wav"), seconds: 3)
        let graph = """
            {"sampleRate": 48000, "channels": 2,
             "nodes": [{"id": "in", "type": "input", "channels": 2}, {"id": "level", "type": "gain", "gain": 0}],
             "connections": [{"from": "in", "to": "level"}, {"from": "level", "to": "output"}]}
            """
        try graph.write(toFile: dir.file("graph.json"), atomically: true, encoding: .utf8)
        var configuration = LiveStreamSession.Configuration(
            input: .file(path: dir.file("in.wav"), realTime: true), outputs: [.file(dir.file("out.m4a"))])
        configuration.graphPath = dir.file("graph.json")
        let session = try LiveStreamSession(configuration)
        #expect(session.unit(named: "level") is GainUnit && session.unit(named: "nope") == nil)
        try await session.start()
        let (before, after) = try await offPool { () throws -> (LiveStreamSession.Meters, LiveStreamSession.Meters) in
            func waitFor(_ seconds: Double) {
                while session.statistics.seconds < seconds, !session.hasEnded { usleep(2_000) }
            }
            waitFor(0.5)
            _ = session.meters  // a reading covers what passed since the last one
            waitFor(0.9)
            let before = session.meters
            try session.unit(named: "level")?.parameter("gain").set(-6)
            waitFor(1.5)
            _ = session.meters
            waitFor(2.5)
            return (before, session.meters)
        }
        while !session.hasEnded { try await Task.sleep(nanoseconds: 20_000_000) }
        _ = await session.stop()
        // The tones peak at 0.25 (16-bit); −6 dB is 0.501 of that.
        let half = Float(pow(10, -6.0 / 20)) * 0.25
        #expect(abs(before.input.peak - 0.25) < 0.005 && abs(before.output.peak - 0.25) < 0.005, "\(before)")
        #expect(abs(before.input.rms - 0.25 / Float(2).squareRoot()) < 0.005, "\(before)")
        #expect(abs(after.input.peak - 0.25) < 0.005 && abs(after.output.peak - half) < 0.005, "\(after)")
        let decoded = try FFmpeg.decode(dir.file("out.m4a"), channels: 2)
        let early = SignalCheck.toneAmplitude(decoded[0][12_000..<36_000], frequency: 440)  // before the change at 0.9 s
        let late = SignalCheck.toneAmplitude(decoded[0][96_000..<120_000], frequency: 440)
        #expect(abs(early - 0.25) < 0.01 && abs(late - Double(half)) < 0.01, "\(early) \(late)")
    }

    @Test("A device input through the voice chain: the virtual device plays a WAV as the microphone, and the stream lasts as long")
    func deviceThroughGraph() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(
            dir.file("mic.wav"),
            channels: [(0..<96_000).map { Float(0.3 * sin(2 * Double.pi * 300 * Double($0) / 48_000)) }],
            sampleRate: 48_000, sampleType: .int16)
        var configuration = LiveStreamSession.Configuration(
            input: .device(name: dir.file("mic.wav"), backend: .virtual), outputs: [.file(dir.file("out.m4a"))])
        configuration.graphPath = examplesDirectory + "/voice-chain.json"
        let session = try LiveStreamSession(configuration)
        try await session.start()
        while !session.hasEnded { try await Task.sleep(nanoseconds: 10_000_000) }
        let summary = await session.stop()
        #expect(summary.error == nil)
        #expect(summary.statistics.framesDropped == 0, "\(summary.statistics)")
        let info = try FFmpeg.probe(dir.file("out.m4a"))
        #expect(info["channels"] == "2" && info["sample_rate"] == "48000", "\(info)")
        // A device captures until it is stopped: at least the input's 2 s, and exactly what the session took in.
        let frames = Int(info["duration_ts"] ?? "") ?? 0
        #expect(frames >= 96_000 && frames == Int((summary.statistics.seconds * 48_000).rounded()), "\(info) \(summary.statistics)")
        let decoded = try FFmpeg.decode(dir.file("out.m4a"), channels: 2)
        // The chain (eq, compressor with makeup gain, reverb, delay, limiter) keeps the 300 Hz tone, below -1 dBFS.
        let tone = SignalCheck.toneAmplitude(decoded[0][24_000..<72_000], frequency: 300)
        #expect(tone > 0.1, "300 Hz at \(tone)")
        #expect((decoded[0] + decoded[1]).map(abs).max()! < 0.95)
    }

    @Test("Bad configurations are refused before anything opens, with messages a user can act on")
    func badConfigurations() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("in.wav"), seconds: 0.5)
        let input = LiveStreamSession.Input.file(path: dir.file("in.wav"), realTime: false)
        func refusal(_ configure: (inout LiveStreamSession.Configuration) throws -> Void) throws -> AudioError? {
            var configuration = LiveStreamSession.Configuration(input: input, outputs: [.file(dir.file("ok.flv"))])
            try configure(&configuration)
            do {
                _ = try LiveStreamSession(configuration)
                return nil
            } catch { return error }
        }
        #expect(try refusal { $0.outputs = [] }?.message.contains("at least one output") == true)
        #expect(try refusal { $0.outputs = [.file(dir.file("no/such/folder/x.flv"))] }?.code == .fileIO)
        #expect(try refusal { $0.outputs = [.file(dir.file("a.flv")), .file(dir.file("a.flv"))] }?.message.contains("twice") == true)
        #expect(try refusal { $0.sampleRate = 12_345 }?.code == .unsupportedSampleRate)
        #expect(try refusal { $0.input = .file(path: dir.file("missing.wav"), realTime: true) }?.code == .fileIO)
        #expect(try refusal { $0.graphPath = examplesDirectory + "/voice-file-chain.json" }?.code == .invalidGraphDescription)
        #expect(throws: AudioError.self) { try LiveStreamSession.Output(parsing: "http://example.com/live/key") }
        #expect(throws: AudioError.self) { try LiveStreamSession.Output(parsing: dir.file("out.ogg")) }
        #expect(throws: AudioError.self) { try LiveStreamSession.Output(parsing: "rtmp://host/live") }
        #expect(!FileManager.default.fileExists(atPath: dir.file("ok.flv")))
    }

    @Test("An RTMP output that cannot connect fails start() with its error, and the files it had created are removed")
    func failedStartCleansUp() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("in.wav"), seconds: 0.5)
        let port = try freeLoopbackPort()
        let configuration = LiveStreamSession.Configuration(
            input: .file(path: dir.file("in.wav"), realTime: false),
            outputs: [.file(dir.file("out.flv")), try .init(parsing: "rtmp://127.0.0.1:\(port)/live/secret-key")])
        let session = try LiveStreamSession(configuration)
        do {
            try await session.start()
            Issue.record("start() should have failed")
        } catch {
            #expect(error.code == .connectionFailed && !error.message.contains("secret-key"), "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: dir.file("out.flv")))
        _ = await session.stop()
    }
}

@Suite("liveaudio stream", .serialized)
struct StreamCommandTests {
    var liveaudio: String { productsDirectory + "/liveaudio" }

    @Test("Streams a file in real time to a server and a file, printing statistics once a second; the key never appears")
    func streamsAndPrints() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("in.wav"), seconds: 2.5)
        let r = try await runTool(
            liveaudio,
            ["stream", "--input", dir.file("in.wav"), "--to", server.url("cli-secret"), "--to", dir.file("out.m4a"), "--bitrate", "96k"])
        #expect(r.status == 0, "\(r.stderr); nginx log: \(server.log)")
        let lines = r.stdout.split(separator: "\n")
        #expect(lines.filter { $0.contains("publishing") }.count >= 2, "\(r.stdout)")
        #expect(lines.last?.hasPrefix("streamed") == true && lines.last?.contains("stopped") == true, "\(r.stdout)")
        #expect(!(r.stdout + r.stderr).contains("cli-secret"))
        server.stop()
        #expect(server.recordedFiles(start: 1).count == 1)
        let info = try FFmpeg.probe(dir.file("out.m4a"))
        #expect(info["duration_ts"] == "120000", "\(info)")
    }

    @Test("SIGINT stops the stream and still finishes the M4A")
    func interruptFinishes() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("in.wav"), seconds: 20)
        // Started, interrupted and waited for on a thread of its own, so a busy cooperative pool cannot delay the
        // signal past the end of the input.
        let liveaudio = self.liveaudio
        let (child, status) = try await offPool { () -> (ChildProcess, Int32) in
            let child = try ChildProcess(
                liveaudio, ["stream", "--input", dir.file("in.wav"), "--to", dir.file("out.m4a")], log: dir.file("log.txt"))
            usleep(1_500_000)
            kill(child.pid, SIGINT)
            return (child, child.wait(timeout: 10))
        }
        #expect(status == 0, "\(child.output)")
        let check = try runProcess("ffmpeg", ["-v", "error", "-i", dir.file("out.m4a"), "-f", "null", "-"])
        #expect(check.status == 0 && check.stderr.isEmpty, "\(check.stderr)")
        let frames = Int(try FFmpeg.probe(dir.file("out.m4a"))["duration_ts"] ?? "") ?? 0
        // Stopped early (the input is 20 s, paced in real time), and everything up to the signal is there.
        #expect(frames > 48_000 && frames < 19 * 48_000, "\(frames)")
    }

    @Test("SIGINT while the start waits for a server that never answers ends the run within a second")
    func interruptDuringStart() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("in.wav"), seconds: 5)
        let listener = try SilentListener()
        let liveaudio = self.liveaudio
        let (child, status, seconds) = try await offPool { () -> (ChildProcess, Int32, Double) in
            let child = try ChildProcess(
                liveaudio,
                ["stream", "--input", dir.file("in.wav"), "--to", "rtmp://127.0.0.1:\(listener.port)/live/key", "--to", dir.file("out.m4a")],
                log: dir.file("log.txt"))
            usleep(700_000)  // connected, waiting for the handshake's answer (10 s before it times out)
            let signalled = monotonicNanoseconds()
            kill(child.pid, SIGINT)
            let status = child.wait(timeout: 10)
            return (child, status, Double(monotonicNanoseconds() - signalled) / 1e9)
        }
        #expect(status == 0, "\(child.output)")
        #expect(seconds < 1, "\(seconds) s after the signal")
        #expect(child.output.contains("stopped before the stream started"), "\(child.output)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("out.m4a")), "the file the start had created is deleted")
        withExtendedLifetime(listener) {}
    }

    @Test("Destinations from a file and from the environment: the key is in neither the command line nor the output")
    func destinationsOutsideTheCommandLine() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("in.wav"), seconds: 2)
        let list = dir.file("destinations.txt")
        try "# where the show goes\n\n  \(server.url("file-secret"))  \n\(dir.file("out.flv"))\n".write(
            toFile: list, atomically: true, encoding: .utf8)
        chmod(list, 0o600)
        let liveaudio = self.liveaudio
        let log = dir.file("log.txt")
        let url = server.url("env-secret")
        // Watched from a thread of its own while it runs: what any local user could read of its command line.
        let (status, cmdline) = try await offPool { () -> (Int32, String) in
            let child = try ChildProcess(
                liveaudio,
                ["stream", "--input", dir.file("in.wav"), "--to-file", list, "--to-env", "LA_TEST_DESTINATION"],
                environment: ["LA_TEST_DESTINATION": url], log: log)
            usleep(500_000)
            let cmdline = (try? String(contentsOfFile: "/proc/\(child.pid)/cmdline", encoding: .utf8)) ?? ""
            return (child.wait(timeout: 30), cmdline)
        }
        let output = try String(contentsOfFile: log, encoding: .utf8)
        #expect(status == 0, "\(output); nginx log: \(server.log)")
        #expect(cmdline.contains("--to-file"), "the command line was read: \(cmdline)")
        #expect(!cmdline.contains("secret"), "\(cmdline)")
        #expect(!output.contains("file-secret") && !output.contains("env-secret"), "\(output)")
        #expect(!output.contains("other users can read"), "a 600 file is not warned about: \(output)")
        #expect(output.contains("<key>"), "the outputs are named with the key hidden: \(output)")
        server.stop()
        #expect(server.recordedFiles(start: 1).count == 2, "both RTMP destinations published")
        #expect(try FFmpeg.probe(dir.file("out.flv"))["codec_name"] == "aac")

        // A destinations file other users can read is used, with a warning.
        chmod(list, 0o644)
        try "\(dir.file("again.flv"))\n".write(toFile: list, atomically: false, encoding: .utf8)
        let r = try await runTool(liveaudio, ["stream", "--input", dir.file("in.wav"), "--no-realtime", "--to-file", list])
        #expect(r.status == 0 && r.stderr.contains("other users can read"), "\(r.stderr)")
    }

    @Test("Bad arguments exit 1 with a clear message and create nothing", arguments: [
        (["--to", "http://x/live/k"], "rtmp://"),
        (["--to", "rtmp:/127.0.0.1/live/hidden-key"], "rtmp://"),
        (["--to", "rtmpx://127.0.0.1/live/hidden-key"], "'rtmpx:/…'"),
        (["--to", "http://127.0.0.1/live/hidden-key"], "rtmp://"),
        (["--to", "127.0.0.1/live/hidden-key"], "without an extension"),
        (["--to", "rtmp://127.0.0.1/live/hidden-key", "--to", "out.ogg"], "'.ogg'"),
        (["--to-env", "LA_TEST_UNSET_VARIABLE"], "LA_TEST_UNSET_VARIABLE is not set"),
        (["--to-file", "out.missing.txt"], "cannot read the destinations file"),
        (["--to-file", "out.bad.txt"], "line 2"),
        (["--to", "out.ogg"], ".flv"),
        (["--to", "rtmp://127.0.0.1:1/live/hidden-key"], "cannot connect"),
        ([], "--to"),
        (["--to", "out.flv", "--bitrate", "fast"], "--bitrate"),
        (["--to", "out.flv", "--duration", "0"], "--duration"),
        (["--to", "out.flv", "--backend", "pulse"], "--backend"),
    ])
    func badArguments(arguments: [String], expected: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("in.wav"), seconds: 0.5)
        var expectedFiles = ["in.wav"]
        if arguments.contains("out.bad.txt") {
            try "\(dir.file("fine.flv"))\nrtmp:/127.0.0.1/live/hidden-key\n".write(
                toFile: dir.file("out.bad.txt"), atomically: true, encoding: .utf8)
            expectedFiles.append("out.bad.txt")
        }
        let r = try await runTool(
            liveaudio,
            ["stream", "--input", dir.file("in.wav")] + arguments.map { $0.hasPrefix("out.") ? dir.file($0) : $0 })
        #expect(r.status == 1, "\(r.stdout) \(r.stderr)")
        #expect(r.stderr.contains(expected), "\(r.stderr)")
        #expect(!(r.stdout + r.stderr).contains("hidden-key"), "\(r.stdout) \(r.stderr)")
        #expect((try FileManager.default.contentsOfDirectory(atPath: dir.path)).sorted() == expectedFiles.sorted())
    }
}

@Suite("Live-stream session lifecycle", .serialized)
struct LiveStreamLifecycleTests {
    /// A stop while the start waits for a server that accepted the connection and never answers: the start gives up
    /// instead of waiting out the response timeout (60 s here), deletes the file it created, and the device never
    /// opens. How soon a person sees it end is measured on the command line, in a process of its own: within a second
    /// of SIGINT. Here the stop's resumptions share this test process's cooperative pool with the suites running
    /// beside it, which held them back 6 and 10 s in two clean-clone runs; so the timeout is long and
    /// the bound half of it: what fails is a stop that waits for the server, not a busy machine.
    @Test("A stop during the start breaks it off, not waiting for the server's timeout; the device is closed and nothing is left behind")
    func stopDuringStart() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("mic.wav"), seconds: 2)
        let listener = try SilentListener()
        var configuration = LiveStreamSession.Configuration(
            input: .device(name: dir.file("mic.wav"), backend: .virtual),
            outputs: [.file(dir.file("out.m4a")), try .init(parsing: "rtmp://127.0.0.1:\(listener.port)/live/key")])
        configuration.rtmp.responseTimeout = 60
        let session = try LiveStreamSession(configuration)
        let starting = Task { () -> AudioError? in
            do throws(AudioError) { try await session.start() } catch { return error }
            return nil
        }
        try await Task.sleep(nanoseconds: 300_000_000)
        let began = monotonicNanoseconds()
        _ = await session.stop()
        let error = await starting.value
        let seconds = Double(monotonicNanoseconds() - began) / 1e9
        #expect(seconds < 30, "the stop took \(seconds) s: the 60 s response timeout was waited for")
        let e = try #require(error, "the start went on after the stop")
        #expect(e.code == .invalidState && e.message.contains("stopped while it started"), "\(e)")
        #expect(!session.isDeviceOpen)
        #expect(!FileManager.default.fileExists(atPath: dir.file("out.m4a")), "the file the start created is deleted")
        // Stopped: it does not start again.
        await #expect(throws: AudioError.self) { try await session.start() }
        withExtendedLifetime(listener) {}
    }

    @Test("A start after a failed start runs; a second start, a stop before a start and a second stop are handled")
    func startAfterFailure() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeTwoTones(dir.file("in.wav"), seconds: 0.5)
        // The server is down for the first start, which fails; it is back for the second, which streams.
        let server = try NginxRTMPServer()
        defer { server.remove() }
        server.stop()
        var configuration = LiveStreamSession.Configuration(
            input: .file(path: dir.file("in.wav"), realTime: false),
            outputs: [try .init(parsing: server.url("retry")), .file(dir.file("retry.flv"))])
        configuration.rtmp.responseTimeout = 2
        let retried = try LiveStreamSession(configuration)
        do {
            try await retried.start()
            Issue.record("a start with the server down went through")
        } catch {
            #expect(error.code == .connectionFailed, "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: dir.file("retry.flv")), "the failed start left its file")
        try server.start()
        try await retried.start()
        while !retried.hasEnded { try await Task.sleep(nanoseconds: 10_000_000) }
        let streamed = await retried.stop()
        #expect(streamed.error == nil && streamed.statistics.packetsEncoded > 0, "\(streamed.statistics)")
        #expect(streamed.statistics.outputs.contains { $0.rtmp == nil && $0.packetsWritten > 0 }, "the file: \(streamed.statistics)")
        #expect(streamed.statistics.outputs.contains { $0.rtmp?.state == .stopped }, "the server: \(streamed.statistics)")
        server.stop()
        #expect(server.recordedFiles(start: 2).count == 1, "the second start published")

        let session = try LiveStreamSession(
            LiveStreamSession.Configuration(input: .file(path: dir.file("in.wav"), realTime: false), outputs: [.file(dir.file("out.aac"))]))
        try await session.start()
        do {
            try await session.start()
            Issue.record("a second start was taken")
        } catch {
            #expect(error.message.contains("already started"), "\(error)")
        }
        while !session.hasEnded { try await Task.sleep(nanoseconds: 10_000_000) }
        let summary = await session.stop()
        #expect(summary.error == nil && summary.statistics.packetsEncoded > 0, "\(summary.statistics)")
        let again = await session.stop()
        #expect(again.error == nil)

        let never = try LiveStreamSession(
            LiveStreamSession.Configuration(input: .file(path: dir.file("in.wav"), realTime: false), outputs: [.file(dir.file("never.aac"))]))
        _ = await never.stop()
        await #expect(throws: AudioError.self) { try await never.start() }
        #expect(!FileManager.default.fileExists(atPath: dir.file("never.aac")))
    }
}
