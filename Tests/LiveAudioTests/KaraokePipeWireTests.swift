import AudioDevices
import Foundation
import LiveAudio
import Synchronization
import Testing
import TestSupport

/// The karaoke session in this process on PipeWire's own backend, each test with its own server (PipeWire and
/// WirePlumber, stopped by PID): what the room does when the route changes under it, when the server interrupts it,
/// and the sync rule on a PipeWire loop.
@Suite(.serialized) struct KaraokePipeWireTests {
    /// A steady tone, `seconds` long: a gap in a recording of it is a run of silence.
    static func tone(_ dir: TemporaryDirectory, seconds: Double) throws -> String {
        let path = dir.file("tone.wav")
        let n = Int(seconds * 48_000)
        try writeWAV(path, channels: [(0..<n).map { 0.25 * sin(2 * Float.pi * 440 * Float($0) / 48_000) }])
        return path
    }

    /// The longest run of samples under −80 dBFS in `samples` from `from` on, and where it starts.
    static func longestSilence(_ samples: [Float], from: Int) -> (start: Int, length: Int) {
        var best = (start: 0, length: 0), run = 0
        for i in from..<samples.count {
            if abs(samples[i]) < 1e-4 {
                run += 1
                if run > best.length { best = (i - run + 1, run) }
            } else {
                run = 0
            }
        }
        return best
    }

    static func session(_ server: PipeWireServer, song: String, dir: TemporaryDirectory) -> KaraokeSession.Configuration {
        var configuration = KaraokeSession.Configuration(song: song)
        configuration.backend = .pipewire
        configuration.pipeWireRemote = server.remote
        configuration.periodFrames = 256
        configuration.recordPath = dir.file("room.wav")
        configuration.roundTrip = .milliseconds(0)
        return configuration
    }

    /// While a session plays on headphones (a sink whose form factor says so), `wpctl set-default` to a speaker: the
    /// move is an event within 100 ms of the command, the song and the monitor follow (our one playback stream is
    /// linked to the speaker), and the voice leaves the output (the room's policy off headphones) while the
    /// accompaniment plays on; back to the headphones, the voice is back. The recording has no gap. Then every sink
    /// removed: the route is lost; a new sink: the route returns. The microphone hears both sinks (their monitors
    /// linked into it), so the voice is the output heard back, 20 dB down.
    @Test func theRoomFollowsTheRouteAndTakesTheVoiceOffSpeakers() async throws {
        let server = try await PipeWireServer.started(sinks: [], sources: ["mic"])
        defer { server.stop() }
        try server.createNode("phones", mediaClass: "Audio/Sink", properties: "device.form-factor=headphone")
        try server.createNode("spk", mediaClass: "Audio/Sink", properties: "device.form-factor=speaker")
        try server.setDefault("phones")
        try server.linkMonitor(of: "phones", into: "mic")
        try server.linkMonitor(of: "spk", into: "mic")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var configuration = Self.session(server, song: try Self.tone(dir, seconds: 30), dir: dir)
        configuration.monitorVoiceVolume = -20
        configuration.inputDevice = "mic"  // named: the output alone follows the default
        let session = try KaraokeSession(configuration)
        let log = EventLog()
        let listener = Task { for await event in session.deviceEvents { log.add(event) } }
        defer { listener.cancel() }
        try await session.start()
        let started = monotonicNanoseconds()
        #expect(session.deviceGrant?.outputDevice == "phones" && session.deviceGrant?.inputDevice == "mic", "\(String(describing: session.deviceGrant))")

        /// The voice's and the accompaniment's peaks in the output over the next half second (dBFS).
        func heard() async throws -> (voice: Double, accompaniment: Double) {
            _ = session.meters
            _ = try await offPool { usleep(500_000) }
            let m = session.meters
            return (Double(m.monitorVoice.peakDecibels), Double(m.accompaniment.peakDecibels))
        }
        _ = try await offPool { usleep(1_000_000) }
        let onPhones = try await heard()
        #expect(onPhones.voice > -40 && !session.room.isVoiceOffHeadphones, "on headphones the voice is heard: \(onPhones)")

        try server.setDefault("spk")
        let returned = monotonicNanoseconds()
        try await offPool {
            try waitUntil("the move to spk", seconds: 5) {
                log.first { if case .routeChanged(let c) = $0 { c.reason == .moved && c.to == "spk" } else { false } } != nil
            }
        }
        let moved = try #require(log.firstTime { if case .routeChanged(let c) = $0 { c.reason == .moved && c.to == "spk" } else { false } })
        let move = try #require(log.first { if case .routeChanged(let c) = $0 { c.reason == .moved && c.to == "spk" } else { false } })
        print("karaoke on PipeWire: \(move), \(Double(Int64(moved) - Int64(returned)) / 1e6) ms after wpctl returned")
        #expect(moved < returned + 100_000_000, "the move came \(Double(moved - returned) / 1e6) ms after wpctl")
        if case .routeChanged(let c) = move { #expect(c.from == "phones" && c.toHeadphones == false, "\(c)") }
        try await offPool { try waitUntil("the voice off", seconds: 1, interval: 5_000) { session.room.isVoiceOffHeadphones } }
        let offPhones = try await heard()
        print("on headphones: \(onPhones); on the speaker: \(offPhones)")
        #expect(offPhones.voice < -90, "on the speaker the voice is out of the output: \(offPhones)")
        #expect(offPhones.accompaniment > -20, "the accompaniment plays on: \(offPhones)")

        try server.setDefault("phones")
        try await offPool { try waitUntil("the voice back", seconds: 2, interval: 5_000) { !session.room.isVoiceOffHeadphones } }
        let back = try await heard()
        #expect(back.voice > -40, "back on headphones the voice is heard: \(back)")

        // Every sink removed: the route is lost; a sink made: it returns.
        try server.destroy("spk")
        try server.destroy("phones")
        try await offPool {
            try waitUntil("the route lost", seconds: 5) { log.contains { if case .routeLost = $0 { true } else { false } } }
        }
        #expect(!session.isOutputRouted)
        try server.createNode("phones2", mediaClass: "Audio/Sink", properties: "device.form-factor=headphone")
        try await offPool {
            try waitUntil("the route back", seconds: 5) { log.contains { if case .routeReturned = $0 { true } else { false } } }
            usleep(500_000)
        }
        #expect(session.isOutputRouted)
        let wall = Double(monotonicNanoseconds() - started) / 1e9
        let summary = await session.stop()
        print("karaoke on PipeWire: wall \(wall) s; \(log.all.map(\.description)); \(summary)")
        #expect(summary.error == nil && summary.droppedFrames == 0, "\(summary)")
        // The room's recording starts half a second after the start returns (the streams settle meanwhile).
        #expect(abs(summary.seconds - (wall - 0.5)) < 0.15, "the recording's \(summary.seconds) s in \(wall) s of wall time")
        // The room's recording: the accompaniment (and the voice) throughout, no gap — the moves and the lost route
        // included (the microphone's source drives the graph on when no sink is there).
        let recording = try FFmpeg.decode(dir.file("room.wav"), channels: 2)[0]
        #expect(abs(Double(recording.count) / 48_000 - summary.seconds) < 0.05, "\(recording.count) frames")
        let silence = Self.longestSilence(recording, from: 4_800)
        #expect(silence.length < 48, "a gap of \(silence.length) frames at \(silence.start) in the recording; gaps \(summary.gaps)")
        #expect(summary.gaps.isEmpty, "\(summary.gaps)")
    }

    /// `karaoke` and `monitor`, the tool as a user runs it, print the output's change by node name within 100 ms of
    /// `wpctl set-default`'s return (each line stamped as it was read), the new sink's form factor included (the
    /// sink was suspended until then: its info on waking carries no properties, and must not erase them); `stream`,
    /// which captures alone, prints its input's move to the new default source the same way.
    @Test func theToolPrintsTheRouteByName() async throws {
        let server = try await PipeWireServer.started(sinks: [], sources: ["mic"])
        defer { server.stop() }
        try server.createNode("phones", mediaClass: "Audio/Sink", properties: "device.form-factor=headphone")
        try server.createNode("spk", mediaClass: "Audio/Sink", properties: "device.form-factor=speaker")
        try server.setDefault("phones")
        // Two sources of the kind a sound card's are (a virtual source cannot be made the default).
        try server.createNode("usbmic", mediaClass: "Audio/Source")
        try server.createNode("headsetmic", mediaClass: "Audio/Source")
        try server.setDefault("usbmic")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let tool = productsDirectory + "/liveaudio"
        let karaoke = try ChildProcess(
            tool, ["karaoke", try Self.tone(dir, seconds: 30), "--backend", "pipewire", "--input", "mic", "--duration", "20"],
            environment: server.environment, log: dir.file("karaoke.log"), stampedLog: true)
        defer { karaoke.stop(signal: SIGINT) }
        let monitor = try ChildProcess(
            tool, ["monitor", "--backend", "pipewire", "--input", "mic", "--duration", "20"],
            environment: server.environment, log: dir.file("monitor.log"), stampedLog: true)
        defer { monitor.stop(signal: SIGINT) }
        let stream = try ChildProcess(
            tool, ["stream", "--backend", "pipewire", "--to", dir.file("out.flv"), "--duration", "20"],
            environment: server.environment, log: dir.file("stream.log"), stampedLog: true)
        defer { stream.stop(signal: SIGINT) }
        @Sendable func lines(_ name: String) -> [(time: Double, text: String)] {
            ((try? String(contentsOfFile: dir.file(name), encoding: .utf8)) ?? "").split(separator: "\n").compactMap { line in
                guard let space = line.firstIndex(of: " "), let t = Double(line[..<space]) else { return nil }
                return (t, String(line[line.index(after: space)...]))
            }
        }
        try await offPool {
            try waitUntil("both on phones", seconds: 20, interval: 50_000) {
                server.nodes().filter { ($0.props["application.name"] as? String) == "liveaudio" }.count == 5
            }
            usleep(1_500_000)
        }
        try server.setDefault("spk")
        let returned = Double(monotonicNanoseconds()) / 1e9
        let moved = "route changed: output moved: phones → spk (not headphones)"
        try await offPool {
            do {
                try waitUntil("the moves printed", seconds: 5) {
                    lines("karaoke.log").contains { $0.text.contains(moved) } && lines("monitor.log").contains { $0.text.contains(moved) }
                }
            } catch {
                print("karaoke: \(lines("karaoke.log").map(\.text))\nmonitor: \(lines("monitor.log").map(\.text))")
                throw error
            }
        }
        for name in ["karaoke.log", "monitor.log"] {
            let line = try #require(lines(name).first { $0.text.contains(moved) })
            print("\(name): \(line.text), \((line.time - returned) * 1000) ms after wpctl returned")
            #expect(line.time - returned < 0.1, "\(name): the move printed \((line.time - returned) * 1000) ms after wpctl returned")
        }
        // The stream's microphone follows the default source.
        try server.setDefault("headsetmic")
        let sourceReturned = Double(monotonicNanoseconds()) / 1e9
        let streamMoved = "route changed: input moved: usbmic → headsetmic"
        try await offPool { try waitUntil("the stream's move printed", seconds: 5) { lines("stream.log").contains { $0.text.contains(streamMoved) } } }
        let line = try #require(lines("stream.log").first { $0.text.contains(streamMoved) })
        print("stream.log: \(line.text), \((line.time - sourceReturned) * 1000) ms after wpctl returned")
        #expect(line.time - sourceReturned < 0.1, "stream: the move printed \((line.time - sourceReturned) * 1000) ms after wpctl returned")
        karaoke.stop(signal: SIGINT)
        monitor.stop(signal: SIGINT)
        stream.stop(signal: SIGINT)
    }

    /// Our capture node paused from outside for a second, then started: the interruption is a begin/end pair (not a
    /// fault), and the room's recording keeps the wall time — the second it held is silence in its place, and the
    /// summary marks it where it is.
    @Test func anInterruptionIsAMarkedGapInTheRecording() async throws {
        let server = try await PipeWireServer.started(sinks: ["spk"], sources: ["mic"])
        defer { server.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let session = try KaraokeSession(Self.session(server, song: try Self.tone(dir, seconds: 30), dir: dir))
        let log = EventLog()
        let listener = Task { for await event in session.deviceEvents { log.add(event) } }
        defer { listener.cancel() }
        try await session.start()
        let started = monotonicNanoseconds()
        _ = try await offPool { usleep(1_500_000) }
        try await offPool { try server.interrupt("liveaudio.capture", for: 1, log: log, settle: 1) }
        let wall = Double(monotonicNanoseconds() - started) / 1e9
        let summary = await session.stop()
        print("interrupted karaoke on PipeWire: \(log.all.map(\.description)); gaps \(summary.gaps)")
        #expect(summary.error == nil && session.room.failure == nil, "\(summary)")
        #expect(!log.contains { if case .fault = $0 { true } else { false } }, "\(log.all)")
        // The room's recording starts half a second after the start returns.
        #expect(abs(summary.seconds - (wall - 0.5)) < 0.15, "the recording's \(summary.seconds) s in \(wall) s")
        let gap = try #require(summary.gaps.first, "no gap marked: \(summary)")
        #expect(summary.gaps.count == 1 && gap.seconds > 0.8 && gap.seconds < 3, "\(summary.gaps)")
        let recording = try FFmpeg.decode(dir.file("room.wav"), channels: 2)[0]
        #expect(abs(Double(recording.count) / 48_000 - summary.seconds) < 0.05, "\(recording.count) frames, \(summary.seconds) s")
        let silence = Self.longestSilence(recording, from: 4_800)
        print("the recording's silence: \(Double(silence.length) / 48_000) s at \(Double(silence.start) / 48_000) s; marked \(gap)")
        #expect(abs(Double(silence.length) / 48_000 - gap.seconds) < 0.002, "silence \(silence), gap \(gap)")
        #expect(abs(Double(silence.start) / 48_000 - gap.at) < 0.002, "silence \(silence), gap \(gap)")
    }

    /// The sync rule on a PipeWire loop at 128 and 256 frames: the headphones are a null sink whose monitor is linked
    /// into a virtual source, the microphone; the round trip found by the calibration clicks; the dry-voice stem —
    /// the accompaniment heard back through the loop — lines up with the accompaniment stem to the sample (the loop is
    /// PipeWire's graph, cycle-exact: nothing in it moves by a fraction of a cycle).
    @Test(arguments: [128, 256]) func theVoiceLandsWhereItWasSungOnPipeWire(quantum: Int) async throws {
        let server = try await PipeWireServer.started(sinks: ["spk"], sources: ["mic"])
        defer { server.stop() }
        try server.linkMonitor(of: "spk", into: "mic")
        try server.forceQuantum(quantum)
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var configuration = KaraokeSession.Configuration(song: try KaraokeSessionTests.song(dir))
        configuration.backend = .pipewire
        configuration.pipeWireRemote = server.remote
        configuration.periodFrames = quantum
        configuration.monitorVoiceVolume = -.infinity
        configuration.roundTrip = .calibrate
        let stems = dir.file("stems")
        try FileManager.default.createDirectory(atPath: stems, withIntermediateDirectories: true)
        configuration.stemsDirectory = stems
        let session = try KaraokeSession(configuration)
        try await session.start()
        let calibrations = session.calibrations
        try await offPool {
            let deadline = Date().addingTimeInterval(40)
            while !session.songHasEnded, Date() < deadline { usleep(10_000) }
        }
        let summary = await session.stop()
        #expect(summary.error == nil && summary.droppedFrames == 0, "\(summary)")
        #expect(summary.roundTripSource == "calibration", "\(summary)")
        let accompaniment = try FFmpeg.decode(stems + "/accompaniment.wav", channels: 2)[0]
        let dry = try FFmpeg.decode(stems + "/voice-dry.wav", channels: 1)[0]
        let lag = try #require(SignalCheck.lag(of: Array(accompaniment.prefix(6 * 48_000)), in: dry, window: 48_000, search: 9600))
        print("karaoke on PipeWire at \(quantum): the voice \(lag) frames off, round trip \(summary.roundTripFrames) frames, xruns \(summary.xruns), \(calibrations) calibrations")
        #expect((1...3).contains(calibrations))
        #expect(lag == 0, "the voice is \(lag) frames off the accompaniment (round trip \(summary.roundTripFrames) frames)")
    }
}
