import Foundation
import LiveAudio
import Testing
import TestSupport

/// `liveaudio stream` against a server written to misbehave (Tests/Support/misbehaving-rtmp-server.py): garbage,
/// floods, absurd chunk sizes and message lengths, thousands of unfinished messages, stalls, resets, a byte a
/// second. Each run ends in a clear error within the publisher's timeouts (10 s for an answer), its peak resident
/// memory stays under 100 MB (a debug build idles at about 60), and the stream key is never printed.
@Suite("A misbehaving RTMP server", .serialized)
struct MisbehavingServerTests {
    static let secret = "m1sb3h4v1ng-key"
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Support/misbehaving-rtmp-server.py").path
    var liveaudio: String { productsDirectory + "/liveaudio" }

    @Test(arguments: [
        ("garbage", "prt!"), ("flood", "tmo!"), ("huge-chunks", "prt!"), ("chunk-size-zero", "prt!"),
        ("huge-message", "prt!"), ("many-partial", "prt!"), ("stall", "tmo!"), ("stall-handshake", "tmo!"),
        ("reset", ""), ("slow", "tmo!"), ("bad-amf", "prt!"),
    ])
    func endsInAClearErrorInBoundedMemory(mode: String, code: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try FFmpeg.run(["-f", "lavfi", "-i", "sine=f=440:d=10", "-ar", "48000", "-ac", "2", dir.file("in.wav")])
        let port = try freeLoopbackPort()
        let server = try ChildProcess(
            "python3", [Self.script, "--port", "\(port)", "--mode", mode], log: dir.file("server.log"))
        defer { server.stop(signal: SIGKILL) }
        let ready = Date().addingTimeInterval(20)
        while !server.output.contains("listening"), server.isRunning, Date() < ready { usleep(20_000) }
        try #require(server.output.contains("listening"), "the server started: \(server.output)")

        let began = Date()
        // GNU time reports the peak resident set (kilobytes) and the run's wall-clock seconds as the last line
        // of its standard error.
        let r = try await runTool(
            "/usr/bin/time",
            ["-f", "maxrss_kb=%M elapsed=%e", liveaudio, "stream", "--input", dir.file("in.wav"), "--duration", "8", "--verbose",
             "--to", "rtmp://127.0.0.1:\(port)/live/\(Self.secret)"])
        let output = r.stdout + r.stderr
        #expect(r.status == 1, "\(mode): exit \(r.status): \(output)")
        let line = try #require(r.stderr.split(separator: "\n").last { $0.hasPrefix("maxrss_kb=") }, "\(r.stderr)")
        let fields = line.split(separator: " ")
        let peak = Int(fields[0].dropFirst("maxrss_kb=".count)) ?? .max
        let elapsed = try #require(fields.last.flatMap { Double($0.dropFirst("elapsed=".count)) }, "\(line)")
        // The publisher's bound runs from the connection (the server notes when it accepted it) to the process's
        // exit (its start plus the run time GNU time measured) — not from the test's own clock, which also counts
        // the wait for this test's task to be resumed: in a crowded phase it read 30 s where the tool's error said
        // the 10 s handshake timeout had fired. The response timeout is 10 s; a loaded machine gets 10 s more. The
        // whole run is bounded too.
        let accepted = server.output.split(separator: "\n").first { $0.hasPrefix("connection at ") }
            .flatMap { Double($0.dropFirst("connection at ".count)) }
        let connected = try #require(accepted, "\(mode): the server saw no connection: \(server.output) \(output)")
        let took = began.timeIntervalSince1970 + elapsed - connected
        #expect(took < 20, "\(mode): ended \(took) s after connecting: \(output)")
        #expect(elapsed < 60, "\(mode): ran \(elapsed) s: \(output)")
        #expect(output.contains("error:"), "\(mode): \(output)")
        if !code.isEmpty { #expect(output.contains("['\(code)']"), "\(mode): \(output)") }
        #expect(!output.contains(Self.secret), "\(mode): the key was printed: \(output)")
        #expect(peak < 100 * 1024, "\(mode): peak resident memory \(peak / 1024) MB")
    }

    /// The decoder refuses what would make it hold unbounded memory: every limit is a protocol error naming it.
    @Test func decoderLimits() throws {
        func feed(_ bytes: [UInt8], _ configure: (inout ChunkStreamDecoder) -> Void = { _ in }) -> AudioError? {
            var d = ChunkStreamDecoder()
            configure(&d)
            d.append(bytes)
            do {
                while try d.nextMessage() != nil {}
                return nil
            } catch { return error }
        }
        func header0(_ csid: UInt8, length: Int, type: UInt8) -> [UInt8] {
            [csid, 0, 0, 0, UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF), type, 0, 0, 0, 0]
        }
        func setChunkSize(_ size: UInt32) -> [UInt8] {
            header0(2, length: 4, type: 1) + [UInt8(size >> 24), UInt8(size >> 16 & 0xFF), UInt8(size >> 8 & 0xFF), UInt8(size & 0xFF)]
        }
        #expect(feed(setChunkSize(0x7FFF_FFFF))?.message.contains("chunk size of 2147483647") == true)
        #expect(feed(setChunkSize(0))?.code == .protocolError)
        #expect(feed(setChunkSize(0xFF_FFFF)) == nil, "16 MiB, the longest message, is a chunk size some servers use")
        // Unfinished messages: four 1000-byte messages, 128 bytes of each sent, against a 400-byte bound.
        var partial: [UInt8] = []
        for csid: UInt8 in 3...6 { partial += header0(csid, length: 1000, type: 20) + [UInt8](repeating: 0, count: 128) }
        #expect(feed(partial) { $0.maximumPartialBytes = 400 }?.message.contains("unfinished messages") == true)
        #expect(feed(partial) { $0.maximumPartialBytes = 512 } == nil)
    }
}
