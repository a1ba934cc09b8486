import Foundation
import LiveAudio
import Testing
import TestSupport

/// `liveaudio stream --input in.wav --to rtmp://…` publishing 8 s of audio to every RTMP server that can be run
/// here — nginx-rtmp, FFmpeg's listen mode, pyrtmp (from PyPI, in the virtual environment `make test` sets up) —
/// and to a server that replays, one mode at a time, the ways servers in the field depart from the spec
/// (Tests/Support/quirky-rtmp-server.py). Each run must end in success, and each server's recording must decode
/// with FFmpeg to the input: correlation at least 0.99 once aligned, and the input's length within one packet.
@Suite("RTMP interoperability")
struct InteroperabilityTests {
    static let support = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Support").path
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path
    static let seconds = 8.0
    static let sampleRate = 48_000
    static let secret = "interop-k3y"
    var liveaudio: String { productsDirectory + "/liveaudio" }

    /// An input none of the servers or the encoder were tuned on: a chirp under a slowly pulsing 523 Hz tone on
    /// the left, 330 Hz with a 1760 Hz sawtooth-enveloped partial on the right.
    static func makeInput(_ dir: TemporaryDirectory) throws -> (path: String, signal: [[Float]]) {
        let path = dir.file("in.wav")
        try FFmpeg.run([
            "-f", "lavfi", "-i",
            "aevalsrc=0.3*sin(2*PI*(200+300*t)*t)+0.2*sin(2*PI*523.25*t)*(0.5+0.5*sin(2*PI*0.7*t))"
                + "|0.25*sin(2*PI*330*t)+0.1*sin(2*PI*1760*t)*(t-floor(t)):s=48000:d=\(Int(seconds))",
            "-c:a", "pcm_f32le", path,
        ])
        return (path, try FFmpeg.decode(path, channels: 2))
    }

    /// Streams the input to `url` with the release-like command line a user types (`--verbose`, so that the
    /// debug notes are in the output for a failure's message).
    func publish(_ input: String, to url: String) async throws -> ProcessResult {
        try await runTool(liveaudio, ["stream", "--input", input, "--verbose", "--to", url])
    }

    /// The recording decodes with FFmpeg to the input: each channel correlates at 0.99 or better once aligned,
    /// and its length is the input's plus the encoder's priming (FFmpeg keeps it for FLV) within one packet.
    static func checkRecording(_ path: String, against input: [[Float]], _ what: String) throws {
        let decoded = try FFmpeg.decode(path, channels: 2)
        let priming = 1024
        let expected = input[0].count + priming
        #expect(
            abs(decoded[0].count - expected) <= 1024,
            "\(what): decoded \(decoded[0].count) frames, expected \(expected) ± 1024")
        let lag = try #require(SignalCheck.lag(of: input[0], in: decoded[0], window: 9600, search: 2400), "\(what): no signal")
        #expect(abs(lag - priming) <= 1024, "\(what): the audio starts \(lag) frames in")
        for c in 0..<2 {
            let r = SignalCheck.compare(input[c], decoded[c], lag: lag, skip: 2048)
            #expect(r.correlation >= 0.99, "\(what): channel \(c) correlates at \(r.correlation) (lag \(lag))")
            #expect(abs(r.levelDB) < 0.5, "\(what): channel \(c) level \(r.levelDB) dB")
            #expect(r.frames > input[c].count - 4096, "\(what): only \(r.frames) frames overlap")
        }
    }

    func expectPublished(_ r: ProcessResult, _ what: String) {
        let output = r.stdout + r.stderr
        #expect(r.status == 0, "\(what): exit \(r.status): \(output)")
        #expect(output.contains("streamed"), "\(what): \(output)")
        #expect(!output.contains(Self.secret), "\(what): the stream key was printed")
    }

    /// Waits until a server prints "listening" (and fails the test if it never does).
    static func waitForListening(_ server: ChildProcess, _ what: String) throws {
        let ready = Date().addingTimeInterval(30)
        while !server.output.contains("listening"), server.isRunning, Date() < ready { usleep(20_000) }
        try #require(server.output.contains("listening"), "\(what) did not start: \(server.output)")
    }

    @Test("nginx-rtmp: the stream is published and recorded whole")
    func nginx() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = try Self.makeInput(dir)
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let r = try await publish(input.path, to: server.url(Self.secret))
        expectPublished(r, "nginx-rtmp")
        server.stop()
        let files = server.recordedFiles(start: 1)
        try #require(files.count == 1, "recordings: \(files); log: \(server.log)")
        try Self.checkRecording(files[0], against: input.signal, "nginx-rtmp")
    }

    @Test("FFmpeg's listen mode (ffmpeg -listen 1 -i rtmp://… -c copy out.flv): published and recorded whole")
    func ffmpegListen() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = try Self.makeInput(dir)
        let port = try freeLoopbackPort()
        let url = "rtmp://127.0.0.1:\(port)/live/\(Self.secret)"
        let recording = dir.file("ffmpeg.flv")
        let server = try ChildProcess(
            "ffmpeg", ["-hide_banner", "-loglevel", "info", "-listen", "1", "-i", url, "-c", "copy", "-y", recording],
            log: dir.file("ffmpeg.log"))
        defer { server.stop(signal: SIGKILL) }
        // FFmpeg serves a single connection: probing the port would take it, so watch the socket table instead.
        try waitUntil("ffmpeg listens on port \(port)", seconds: 30) { isListening(port: port) }
        let r = try await publish(input.path, to: url)
        expectPublished(r, "FFmpeg listen")
        // FFmpeg finishes the file once the publisher has gone.
        let status = await server.finished(timeout: 30)
        #expect(status == 0, "ffmpeg exited with \(status): \(server.output)")
        try Self.checkRecording(recording, against: input.signal, "FFmpeg listen")
    }

    @Test("pyrtmp (PyPI): published, and every packet arrives")
    func pyrtmp() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = try Self.makeInput(dir)
        let python = Self.packageRoot + "/.build/test-venv/bin/python3"
        try #require(
            FileManager.default.isExecutableFile(atPath: python),
            "pyrtmp's virtual environment is missing: `make test` (scripts/install-deps.sh test) makes it")
        let port = try freeLoopbackPort()
        let recording = dir.file("pyrtmp.flv")
        let server = try ChildProcess(
            python, [Self.support + "/pyrtmp-server.py", "--port", "\(port)", "--record", recording],
            log: dir.file("pyrtmp.log"))
        defer { server.stop(signal: SIGKILL) }
        try Self.waitForListening(server, "pyrtmp")
        let r = try await publish(input.path, to: "rtmp://127.0.0.1:\(port)/live/\(Self.secret)")
        expectPublished(r, "pyrtmp")
        _ = await server.finished(timeout: 30)
        try checkAudioCount(server.output, "pyrtmp")
        // pyrtmp stamps a message whose header is fmt 3 with the previous message's time rather than adding the
        // delta, so its file's timestamps are wrong; its audio is not, and FFmpeg decodes it by the packet.
        try Self.checkRecording(recording, against: input.signal, "pyrtmp")
    }

    static let quirks = [
        "plain", "onfcpublish", "no-transaction", "bandwidth-check", "status-variants", "error-replies", "amf3",
        "fmt-first", "chunk-size-anywhere", "s2-no-echo", "handshake-pieces", "handshake-one-write", "s2-after-c2",
        "no-onstatus",
    ]

    @Test("A server with one quirk at a time: published and recorded whole", arguments: quirks)
    func quirkyServer(mode: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = try Self.makeInput(dir)
        let port = try freeLoopbackPort()
        let recording = dir.file("quirky.flv")
        let server = try ChildProcess(
            "python3", [Self.support + "/quirky-rtmp-server.py", "--port", "\(port)", "--mode", mode, "--record", recording],
            log: dir.file("server.log"))
        defer { server.stop(signal: SIGKILL) }
        try Self.waitForListening(server, "the quirky server (\(mode))")
        let r = try await publish(input.path, to: "rtmp://127.0.0.1:\(port)/live/\(Self.secret)")
        expectPublished(r, mode)
        let status = await server.finished(timeout: 30)
        #expect(status == 0, "\(mode): the server exited with \(status): \(server.output)")
        try checkAudioCount(server.output, mode)
        try Self.checkRecording(recording, against: input.signal, mode)
        // What the quirk was is noted at debug level, never as a warning or an error.
        let notes = r.stderr
        switch mode {
        case "s2-no-echo": #expect(notes.contains("does not echo C1"), "\(notes)")
        case "no-onstatus": #expect(notes.contains("no onStatus"), "\(notes)")
        case "onfcpublish": #expect(notes.contains("ignored 'onFCPublish'"), "\(notes)")
        case "bandwidth-check": #expect(notes.contains("ignored '_checkbw'"), "\(notes)")
        default: break
        }
        #expect(!notes.contains("warning"), "\(mode): \(notes)")
    }

    /// The server counted the sequence header and one message per AAC packet of 8 s (375, plus the last
    /// partial packet and the encoder's flush).
    func checkAudioCount(_ output: String, _ what: String) throws {
        let line = try #require(output.split(separator: "\n").last { $0.hasPrefix("audio messages ") }, "\(what): \(output)")
        let count = Int(line.dropFirst("audio messages ".count)) ?? 0
        let packets = Int((Self.seconds * Double(Self.sampleRate) / 1024).rounded(.up))
        #expect(count >= packets + 1 && count <= packets + 3, "\(what): \(count) audio messages for \(packets) packets")
    }
}

/// Whether a socket listens on 127.0.0.1:`port` (from /proc/net/tcp, without connecting to it).
func isListening(port: Int) -> Bool {
    guard let table = try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8) else { return false }
    let local = String(format: "0100007F:%04X", port)
    return table.split(separator: "\n").contains { line in
        let fields = line.split(separator: " ")
        return fields.count > 3 && fields[1] == local && fields[3] == "0A"
    }
}
