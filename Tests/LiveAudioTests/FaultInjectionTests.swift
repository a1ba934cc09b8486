import Foundation
import LiveAudio
import Testing
import TestSupport

/// Faults injected into real processes while the commands run as a user runs them: the RTMP server killed over and
/// over, the sound server killed and restarted, the disk filling up, the tool itself killed. Each test says what
/// must survive and checks it with FFmpeg's decoder (see docs/reliability.md).
@Suite(.serialized) struct FaultInjectionTests {
    var liveaudio: String { productsDirectory + "/liveaudio" }

    // MARK: - The RTMP server killed every 10 s

    /// `stream` for two minutes while nginx-rtmp is killed (SIGKILL) every 10 s and started again 3 s later: every
    /// reconnect succeeds (one recording per start of the server), each recording is an unbroken run of the packets
    /// encoded (the local FLV holds them all), timestamps never go back or restart at zero, and what is missing is
    /// explained: the packets the queue dropped (counted) and at most a second of packets per kill in flight to the
    /// dying server.
    @Test func streamSurvivesTheServerKilledEvery10Seconds() async throws {
        let kills = 12
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try FFmpeg.run(["-f", "lavfi", "-i", "aevalsrc=0.5*sin(2*PI*440*t):s=48000:d=138", "-ac", "2", "-ar", "48000", dir.file("in.wav")])
        let stream = try ChildProcess(
            liveaudio, ["stream", "--input", dir.file("in.wav"), "--to", server.url("faults"), "--to", dir.file("local.flv")],
            log: dir.file("stream.log"))
        defer { stream.stop(signal: SIGKILL) }
        try await offPool {
            try waitUntil("the first publish", seconds: 20, interval: 50_000) { stream.output.contains("publishing") }
            let start = Date()
            for k in 1...kills {
                Thread.sleep(until: start.addingTimeInterval(Double(k) * 10))
                server.kill()
                Thread.sleep(forTimeInterval: 3)
                try server.start()
            }
        }
        let status = await stream.finished(timeout: 60)
        let log = stream.output
        #expect(status == 0, "\(log)")
        server.stop()
        let summary = try #require(log.split(separator: "\n").last { $0.hasPrefix("streamed") }.map(String.init), "\(log)")
        let dropped = try #require(Self.number(after: "dropped ", in: summary), "\(summary)")
        let reconnects = try #require(Self.number(after: "reconnects ", in: summary), "\(summary)")
        #expect(reconnects == kills, "\(summary)")

        let encoded = try packetTimes(dir.file("local.flv"))
        let index = Dictionary(encoded.enumerated().map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
        try #require(encoded.count > 6000, "\(encoded.count) packets encoded")
        var recorded = 0
        var previousLast: Double?
        for start in 1...(kills + 1) {
            let files = server.recordedFiles(start: start)
            try #require(files.count == 1, "start \(start) of the server recorded \(files); \(log)")
            let times = try packetTimes(files[0])
            try #require(!times.isEmpty, "recording \(start) is empty")
            let check = try runProcess("ffmpeg", ["-v", "error", "-i", files[0], "-f", "null", "-"])
            #expect(check.status == 0 && check.stderr.isEmpty, "recording \(start): \(check.stderr)")
            // An unbroken run of what was encoded: each packet one the encoder made, at its own time, none skipped.
            let positions = times.compactMap { index[$0] }
            #expect(positions.count == times.count, "recording \(start) holds times never encoded")
            #expect(zip(positions, positions.dropFirst()).allSatisfy { $1 == $0 + 1 }, "recording \(start) has a gap")
            if let previousLast { #expect(times.first! > previousLast, "recording \(start) goes back in time") }
            previousLast = times.last!
            recorded += times.count
        }
        // Packets of ~21.3 ms: 47 a second.
        let missing = encoded.count - recorded
        print(
            "fault injection: nginx-rtmp killed \(kills) times in \(kills * 10) s; \(reconnects) reconnects; \(encoded.count) packets "
                + "encoded, \(recorded) recorded in \(kills + 1) recordings, \(dropped) dropped by the queue, "
                + "\(missing - dropped) lost in flight")
        #expect(dropped <= missing, "dropped \(dropped), missing \(missing)")
        #expect(missing - dropped <= 47 * kills, "lost in flight: \(missing - dropped) packets over \(kills) kills")
        // The outages (3 s, and the reconnect's back-off) are longer than the 2 s queue: drops are expected.
        #expect(dropped > 0, "\(summary)")
    }

    /// The integer after `label` in `text` (`dropped 12` → 12).
    static func number(after label: String, in text: String) -> Int? {
        guard let range = text.range(of: label, options: .backwards) else { return nil }
        return Int(text[range.upperBound...].prefix { $0.isNumber })
    }

    // MARK: - PulseAudio killed and restarted three times

    /// `record` from a PulseAudio source while the server is killed and restarted three times: three faults and
    /// three reconnects, the WAV readable at every outage, silence where the server was away (the file keeps to the
    /// clock), the tone there again after the last restart, and a clean end on Ctrl-C.
    @Test func recordSurvivesPulseAudioRestartedThreeTimes() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["mic"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("mic")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try FFmpeg.run(["-f", "lavfi", "-i", "aevalsrc=0.5*sin(2*PI*440*t):s=48000:d=120", "-ac", "1", "-ar", "48000", dir.file("tone.wav")])
        _ = try pulse.play(dir.file("tone.wav"), to: "mic")
        let recorder = try ChildProcess(
            liveaudio, ["record", "-o", dir.file("rec.wav"), "--device", "pulse:mic.monitor", "--period", "960"],
            environment: pulse.environment, log: dir.file("record.log"))
        defer { recorder.stop(signal: SIGKILL) }
        @Sendable func frames() -> Int64 { (try? WAVFileReader.info(path: dir.file("rec.wav")).frameCount) ?? 0 }
        try await offPool { try waitUntil("the first second recorded", seconds: 20, interval: 50_000) { frames() >= 48_000 } }
        let started = Date()
        for round in 1...3 {
            let before = frames()
            try await offPool { try waitUntil("a second more recorded", seconds: 30, interval: 50_000) { frames() >= before + 48_000 } }
            pulse.kill()
            try await Task.sleep(nanoseconds: 1_000_000_000)
            // While the server is down, the file is a WAV that FFmpeg reads.
            let check = try runProcess("ffmpeg", ["-v", "error", "-i", dir.file("rec.wav"), "-f", "null", "-"])
            #expect(check.status == 0 && check.stderr.isEmpty, "round \(round): \(check.stderr)")
            try await pulse.restart()
            _ = try pulse.play(dir.file("tone.wav"), to: "mic")
            try await offPool {
                try waitUntil("reconnect \(round)", seconds: 40, interval: 50_000) {
                    recorder.output.components(separatedBy: "reconnected").count - 1 >= round
                }
            }
        }
        // Four seconds on the clock after the last reconnect (the frames written at once fill the time away, and a new
        // capture stream on a null sink's monitor can take over a second to deliver), and two seconds more on disk.
        let afterLast = frames()
        try await Task.sleep(nanoseconds: 4_000_000_000)
        try await offPool { try waitUntil("two seconds after the last reconnect", seconds: 30, interval: 50_000) { frames() >= afterLast + 96_000 } }
        let elapsed = Date().timeIntervalSince(started)
        kill(recorder.pid, SIGINT)
        let status = await recorder.finished(timeout: 20)
        let log = recorder.output
        #expect(status == 0, "\(log)")
        #expect(log.components(separatedBy: "device fault").count - 1 >= 3, "\(log)")
        #expect(log.components(separatedBy: "reconnected after").count - 1 == 3, "\(log)")
        #expect(log.contains("faults 3, reconnects 3") && log.contains("of silence where the device was away"), "\(log)")
        let recorded = try FFmpeg.decode(dir.file("rec.wav"), channels: 1)[0]
        // The outages are in the file as silence: it covers the time since the first second, all of it.
        #expect(Double(recorded.count) / 48_000 >= elapsed, "\(recorded.count) frames over \(elapsed) s")
        #expect(
            SignalCheck.toneAmplitude(recorded[(recorded.count - 48_000)..<(recorded.count - 4800)], frequency: 440) > 0.2,
            "\(log)")
    }

    /// `monitor` from one PulseAudio sink's monitor to another sink while the server is killed and restarted three
    /// times: the status lines count three reconnects, the tone comes out of the speaker sink after the last one,
    /// and Ctrl-C ends the run cleanly.
    @Test func monitorSurvivesPulseAudioRestartedThreeTimes() async throws {
        let pulse = try await PulseAudioServer.started(sinks: ["mic", "spk"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("mic")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try FFmpeg.run(["-f", "lavfi", "-i", "aevalsrc=0.5*sin(2*PI*440*t):s=48000:d=120", "-ac", "1", "-ar", "48000", dir.file("tone.wav")])
        _ = try pulse.play(dir.file("tone.wav"), to: "mic")
        let monitor = try ChildProcess(
            liveaudio,
            ["monitor", "--input", "pulse:mic.monitor", "--output", "pulse:spk", "--period", "480", "--periods", "4",
             "--status-interval", "0.5"],
            environment: pulse.environment, log: dir.file("monitor.log"))
        defer { monitor.stop(signal: SIGKILL) }
        @Sendable func reconnects() -> Int {
            monitor.output.split(separator: "\n").last { $0.hasPrefix("status") }.flatMap {
                Self.number(after: "reconnects ", in: String($0))
            } ?? -1
        }
        try await offPool { try waitUntil("monitoring", seconds: 20, interval: 50_000) { reconnects() == 0 } }
        for round in 1...3 {
            try await Task.sleep(nanoseconds: 1_500_000_000)
            pulse.kill()
            try await Task.sleep(nanoseconds: 1_000_000_000)
            #expect(monitor.isRunning, "round \(round): \(monitor.output)")
            try await pulse.restart()
            _ = try pulse.play(dir.file("tone.wav"), to: "mic")
            try await offPool { try waitUntil("reconnect \(round)", seconds: 40, interval: 50_000) { reconnects() >= round } }
        }
        // The tone through the monitor after the last restart: the speaker sink's monitor, recorded by parec.
        let heard = dir.file("heard.wav")
        let parec = try pulse.record("spk", to: heard)
        try await Task.sleep(nanoseconds: 3_000_000_000)
        kill(parec.pid, SIGINT)
        _ = await parec.finished(timeout: 5)
        kill(monitor.pid, SIGINT)
        let status = await monitor.finished(timeout: 20)
        let log = monitor.output
        #expect(status == 0, "\(log)")
        #expect(reconnects() == 3, "\(log)")
        let summary = log.split(separator: "\n").last { $0.hasPrefix("monitored ") }.map(String.init) ?? ""
        #expect(summary.contains("faults 3, reconnects 3"), "\(log)")
        let left = try FFmpeg.decode(heard, channels: 2)[0]
        try #require(left.count > 96_000, "\(left.count) frames heard")
        #expect(SignalCheck.toneAmplitude(left[(left.count - 72_000)..<(left.count - 4800)], frequency: 440) > 0.2)
    }

    // MARK: - The disk filling up

    /// `record` onto a disk that fills up: exit status 1 with a message that says the disk is full, and the WAV
    /// holds what was recorded before, sample for sample, and decodes without a complaint. Run twice: on a small
    /// tmpfs, and under a file size limit (`ulimit -f`, what stands in where a test cannot mount), where the tool must
    /// not die of SIGXFSZ but end with an error that names the limit.
    /// The virtual device runs in real time: at `--pace fast` on a busy machine the recorder's writer fell behind and
    /// its ring overflowed (counted, as it should be), and the file was no longer the tone sample for sample.
    @Test(arguments: [true, false]) func recordOnAFullDisk(mount: Bool) async throws {
        let disk = try SmallDisk(kibibytes: 768, mount: mount)
        defer { disk.remove() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let tone = (0..<(48_000 * 30)).map { Float(0.3 * sin(2 * Double.pi * 440 * Double($0) / 48_000)) }
        try writeWAV(dir.file("tone.wav"), channels: [tone])
        let r = try await disk.run(
            liveaudio, ["record", "-o", disk.file("rec.wav"), "--backend", "virtual", "--device", dir.file("tone.wav"),
                        "--duration", "30"])
        #expect(r.status == 1, "\(r.stderr)")
        #expect(r.stderr.contains(disk.expectedMessage) && r.stderr.contains(disk.file("rec.wav")), "\(r.stderr)")
        let check = try runProcess("ffmpeg", ["-v", "error", "-i", disk.file("rec.wav"), "-f", "null", "-"])
        #expect(check.status == 0 && check.stderr.isEmpty, "\(check.stderr)")
        let recorded = try disk.decode("rec.wav", channels: 1, into: dir)[0]
        // Most of the disk holds audio (32-bit float, 4 bytes a frame) — not an empty file.
        #expect(recorded.count * 4 > disk.bytes / 2, "\(recorded.count) frames on a \(disk.bytes)-byte disk")
        #expect(maxAbsDifference(recorded, Array(tone.prefix(recorded.count))) < 1e-6)
    }

    // MARK: - SIGKILL at random moments

    /// `record` killed (SIGKILL) at random moments: the WAV plays up to the last second before the kill (its header
    /// is brought up to date every half second), sample for sample the microphone's.
    @Test func recordKilledAtRandomMoments() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let tone = (0..<(48_000 * 30)).map { Float(0.3 * sin(2 * Double.pi * 440 * Double($0) / 48_000)) }
        try writeWAV(dir.file("tone.wav"), channels: [tone])
        let seed = UInt64(Self.dailySeed)
        var generator = SplitMix(seed: seed ^ 0x5EED)
        for attempt in 1...3 {
            let output = dir.file("rec-\(attempt).wav")
            let delay = 1.0 + Double(generator.next() % 1000) / 1000 * 4
            let recorder = try ChildProcess(
                liveaudio, ["record", "-o", output, "--backend", "virtual", "--device", dir.file("tone.wav")],
                log: dir.file("record.log"))
            defer { recorder.stop(signal: SIGKILL) }
            // From the first frame in the header (up to half a second after it was recorded) to the kill.
            let elapsed = try await offPool { () -> Double in
                try waitUntil("the first frames", seconds: 20, interval: 50_000) { ((try? WAVFileReader.info(path: output).frameCount) ?? 0) > 0 }
                let first = Date()
                Thread.sleep(forTimeInterval: delay)
                kill(recorder.pid, SIGKILL)
                return Date().timeIntervalSince(first)
            }
            _ = await recorder.finished(timeout: 10)
            let what = "attempt \(attempt), killed \(elapsed) s after the first frames (seed \(seed))"
            let check = try runProcess("ffmpeg", ["-v", "error", "-i", output, "-f", "null", "-"])
            #expect(check.status == 0 && check.stderr.isEmpty, "\(what): \(check.stderr)")
            let recorded = try FFmpeg.decode(output, channels: 1)[0]
            #expect(Double(recorded.count) / 48_000 >= elapsed - 1, "\(what): \(recorded.count) frames")
            #expect(maxAbsDifference(recorded, Array(tone.prefix(recorded.count))) < 1e-6, "\(what)")
        }
    }

    static var dailySeed: Int { Int(Date().timeIntervalSince1970 / 86_400) }

    static func size(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
    }
}

/// The faults that need no real time — `encode` killed, `stream --no-realtime` onto a full disk — in a suite of their
/// own, which `make test` runs in its first phase beside the computing tests: they encode at full speed, and in the
/// real-time phase that CPU was taken from the sound servers' threads.
@Suite struct FileFaultInjectionTests {
    var liveaudio: String { productsDirectory + "/liveaudio" }

    /// `stream` to an FLV and an ADTS file on a disk that fills up: exit status 1 naming the full disk, and both
    /// files end at their last whole packet — FFmpeg decodes them without a complaint, and they hold the tone.
    @Test func streamToFilesOnAFullDisk() async throws {
        let disk = try SmallDisk(kibibytes: 512)
        defer { disk.remove() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try FFmpeg.run(["-f", "lavfi", "-i", "aevalsrc=0.5*sin(2*PI*440*t):s=48000:d=120", "-ac", "2", "-ar", "48000", dir.file("in.wav")])
        let r = try await disk.run(
            liveaudio,
            ["stream", "--input", dir.file("in.wav"), "--no-realtime", "--to", disk.file("out.flv"), "--to", disk.file("out.aac"),
             "--quiet"])
        #expect(r.status == 1, "\(r.stderr)")
        #expect(r.stderr.contains(disk.expectedMessage), "\(r.stderr)")
        for name in ["out.flv", "out.aac"] {
            let check = try runProcess("ffmpeg", ["-v", "error", "-i", disk.file(name), "-f", "null", "-"])
            #expect(check.status == 0 && check.stderr.isEmpty, "\(name): \(check.stderr)")
            let decoded = try disk.decode(name, channels: 2, into: dir)[0]
            #expect(decoded.count > 5 * 48_000, "\(name): \(decoded.count) frames")
            if decoded.count > 5 * 48_000 {
                #expect(SignalCheck.toneAmplitude(decoded[(decoded.count - 48_000)..<(decoded.count - 4800)], frequency: 440) > 0.25)
            }
        }
    }

    /// `encode` killed (SIGKILL) at random moments, three times for ADTS and three for FLV: every packet that
    /// reached the file plays — FFmpeg decodes the whole file without a complaint, and the audio is the input's
    /// from its start. The moments come from a seed that changes daily (printed on failure).
    @Test func encodeKilledAtRandomMoments() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try FFmpeg.run(["-f", "lavfi", "-i", "aevalsrc=0.5*sin(2*PI*440*t):s=48000:d=300", "-ac", "2", "-ar", "48000", dir.file("in.wav")])
        let seed = UInt64(FaultInjectionTests.dailySeed)
        var generator = SplitMix(seed: seed)
        for container in ["aac", "flv"] {
            for attempt in 1...3 {
                let output = dir.file("out-\(attempt).\(container)")
                let delay = 0.2 + Double(generator.next() % 1000) / 1000 * 1.5
                let encoder = try ChildProcess(liveaudio, ["encode", dir.file("in.wav"), "-o", output], log: dir.file("encode.log"))
                defer { encoder.stop(signal: SIGKILL) }
                try await offPool {
                    try waitUntil("the encoder writing", seconds: 30, interval: 50_000) { FaultInjectionTests.size(output) > 16_384 }
                    Thread.sleep(forTimeInterval: delay)
                    kill(encoder.pid, SIGKILL)
                }
                let status = await encoder.finished(timeout: 10)
                let what = "\(container) attempt \(attempt), killed \(delay) s after 16 KiB (seed \(seed))"
                #expect(status == 128 + SIGKILL, "\(what): it ended by itself (\(status)), the input is too short")
                let check = try runProcess("ffmpeg", ["-v", "error", "-i", output, "-f", "null", "-"])
                #expect(check.status == 0 && check.stderr.isEmpty, "\(what): \(check.stderr)")
                let decoded = try FFmpeg.decode(output, channels: 2)[0]
                // All of it plays: every packet FFmpeg's demuxer finds in the file decodes to its 1024 frames (less
                // the encoder's priming, which FLV's first packet and ADTS's drop).
                let packets = try packetTimes(output).count
                #expect(decoded.count >= (packets - 2) * 1024, "\(what): \(decoded.count) frames from \(packets) packets")
                #expect(decoded.count > 48_000, "\(what)")
                if decoded.count > 48_000 {
                    #expect(SignalCheck.toneAmplitude(decoded[(decoded.count - 48_000)..<(decoded.count - 4800)], frequency: 440) > 0.25, "\(what)")
                }
            }
        }
    }
}

/// A deterministic generator for the kill moments (SplitMix64).
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A small disk for a test: a tmpfs of the given size mounted on a folder of its own (as root), or, where mounting
/// is not allowed, an ordinary folder and a file size limit (`ulimit -f`) on the commands run through ``run``.
/// Unmounted and removed by ``remove()``.
struct SmallDisk {
    let path: String
    let bytes: Int
    let mounted: Bool

    init(kibibytes: Int, mount: Bool = true) throws {
        path = NSTemporaryDirectory() + "liveaudio-disk-" + UUID().uuidString
        bytes = kibibytes * 1024
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        if mount {
            let r = try runProcess("mount", ["-t", "tmpfs", "-o", "size=\(kibibytes)k", "tmpfs", path])
            mounted = r.status == 0
            if !mounted {
                FileHandle.standardError.write(Data("test support: cannot mount a tmpfs (\(r.stderr)); a file size limit stands in\n".utf8))
            }
        } else {
            mounted = false
        }
    }

    func file(_ name: String) -> String { path + "/" + name }

    /// FFmpeg's decoding of `name`, from a copy in `folder` (FFmpeg's output would not fit on the full disk).
    func decode(_ name: String, channels: Int, into folder: TemporaryDirectory) throws -> [[Float]] {
        let copy = folder.file("copy-" + name)
        try? FileManager.default.removeItem(atPath: copy)
        try FileManager.default.copyItem(atPath: file(name), toPath: copy)
        return try FFmpeg.decode(copy, channels: channels)
    }

    /// What the tool's error says: a full disk, or the size limit.
    var expectedMessage: String { mounted ? "the disk is full" : "ulimit -f" }

    /// Runs `executable` with `arguments`; without a mounted disk, under a file size limit of ``bytes``.
    func run(_ executable: String, _ arguments: [String]) async throws -> ProcessResult {
        if mounted { return try await runTool(executable, arguments) }
        return try await runTool("/bin/bash", ["-c", "ulimit -f \(bytes / 1024) && exec \"$0\" \"$@\"", executable] + arguments)
    }

    func remove() {
        if mounted { _ = try? runProcess("umount", ["-l", path]) }
        try? FileManager.default.removeItem(atPath: path)
    }
}
