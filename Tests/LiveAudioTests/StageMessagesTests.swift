import Foundation
import LiveAudio
import LiveAudioStage
import Testing

/// The stage's rules without a server: the controls a page may send, the replies, who may connect and control,
/// `--web`'s address, and the monitor that hands one snapshot to every display.
@Suite("Stage messages and access")
struct StageMessagesTests {
    func control(_ text: String, _ kind: StageMessages.Kind = .karaoke) throws -> StageMessages.Request {
        try StageMessages.control(text, kind: kind)
    }

    func refusal(_ text: String, _ kind: StageMessages.Kind = .karaoke) -> StageMessages.Refusal? {
        do {
            _ = try StageMessages.control(text, kind: kind)
            return nil
        } catch {
            return error
        }
    }

    @Test("Every karaoke and stream action parses to the session's control, its id kept")
    func actions() throws {
        #expect(try control(#"{"type":"control","id":"7","action":"volume","part":"accompaniment","db":-6}"#)
            == .init(id: "7", control: .karaoke(.setVolume(.accompaniment, decibels: -6))))
        #expect(try control(#"{"type":"control","id":8,"action":"volume","part":"monitorVoice","db":"-inf"}"#)
            == .init(id: "8", control: .karaoke(.setVolume(.monitorVoice, decibels: -.infinity))))
        #expect(try control(#"{"type":"control","action":"volume","part":"voice","db":null}"#).control == .karaoke(.setVolume(.voice, decibels: -.infinity)))
        #expect(try control(#"{"type":"control","action":"mute","part":"voice","on":true}"#).control == .karaoke(.setMuted(.voice, true)))
        #expect(try control(#"{"type":"control","action":"key","step":-1}"#).control == .karaoke(.stepKey(semitones: -1)))
        #expect(try control(#"{"type":"control","action":"key","cents":250}"#).control == .karaoke(.setKey(cents: 250)))
        #expect(try control(#"{"type":"control","action":"pause"}"#).control == .karaoke(.pause))
        #expect(try control(#"{"type":"control","action":"resume"}"#).control == .karaoke(.resume))
        #expect(try control(#"{"type":"control","action":"seek","seconds":12.5}"#).control == .karaoke(.seek(seconds: 12.5)))
        #expect(try control(#"{"type":"control","action":"stop"}"#).control == .karaoke(.stop))
        #expect(try control(#"{"type":"control","action":"volume","db":3}"#, .stream).control == .stream(.setVolume(decibels: 3)))
        #expect(try control(#"{"type":"control","action":"mute","on":false}"#, .stream).control == .stream(.setMuted(false)))
        #expect(try control(#"{"type":"control","action":"stop"}"#, .stream).control == .stream(.stop))
    }

    @Test("Bad messages are refused with a reason, the id kept where there is one")
    func refusals() {
        let cases: [(String, String)] = [
            ("{", "not a JSON message"),
            ("[1]", "a message is a JSON object"),
            (#"{"type":"hello"}"#, "type must be"),
            (#"{"type":"control"}"#, "action is required"),
            (#"{"type":"control","action":"launch"}"#, "unknown action"),
            (#"{"type":"control","action":"volume","part":"drums","db":0}"#, "part must be"),
            (#"{"type":"control","action":"volume","part":"voice","db":13}"#, "db must be"),
            (#"{"type":"control","action":"volume","part":"voice","db":"loud"}"#, "db must be"),
            (#"{"type":"control","action":"mute","part":"voice","on":"yes"}"#, "on must be true or false"),
            (#"{"type":"control","action":"key","cents":2500}"#, "cents must be"),
            (#"{"type":"control","action":"key","step":"up"}"#, "step must be a number"),
            (#"{"type":"control","action":"seek","seconds":-1}"#, "0 or more"),
            (#"{"type":"control","action":"seek"}"#, "seconds must be a number"),
            (#"{"type":"control","id":{"a":1},"action":"stop"}"#, "id must be"),
        ]
        for (text, reason) in cases {
            let r = refusal(text)
            #expect(r?.message.contains(reason) == true, "\(text): \(String(describing: r))")
        }
        #expect(refusal(#"{"type":"control","action":"pause"}"#, .stream)?.message.contains("unknown action") == true)
        #expect(refusal(#"{"type":"control","id":"x1","action":"launch"}"#)?.id == "x1")
        let long = #"{"type":"control","action":"stop","pad":""# + String(repeating: "x", count: 5000) + #""}"#
        #expect(refusal(long)?.message.contains("too long") == true)
        // An unknown action is not echoed at length.
        let echo = refusal(#"{"type":"control","action":""# + String(repeating: "a", count: 500) + #""}"#)
        #expect((echo?.message.count ?? 999) < 80)
        // Nor escaped at length (control characters would each take six in a JSON reply).
        let escaped = refusal(#"{"type":"control","action":""# + String(repeating: #"\u0001"#, count: 40) + #""}"#)
        #expect((escaped?.message.count ?? 999) < 80, "\(String(describing: escaped))")
    }

    @Test("Replies are JSON objects a page can read")
    func replies() throws {
        for (id, error) in [("1", nil), (nil, "a \"quoted\" <reason>\n"), ("2", "x")] as [(String?, String?)] {
            let text = StageMessages.reply(id: id, error: error)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
            #expect(object["type"] as? String == "reply")
            #expect(object["ok"] as? Bool == (error == nil))
            #expect(object["error"] as? String == error)
            #expect(!text.contains("<"), "never markup in the JSON text: \(text)")
        }
    }

    @Test("Who may connect and control: loopback needs no token; the Host must be the server's; the Origin its own")
    func access() {
        let local = StageAccess(host: "127.0.0.1", port: 8080, token: nil)
        #expect(local.allowsHost("127.0.0.1:8080") && local.allowsHost("localhost:8080") && local.allowsHost("[::1]:8080"))
        #expect(!local.allowsHost("evil.example:8080") && !local.allowsHost("127.0.0.1:8081") && !local.allowsHost(nil))
        #expect(!local.allowsHost("192.168.1.5:8080"))
        #expect(local.mayControl(token: nil))
        #expect(local.allowsOrigin(nil, authority: "127.0.0.1:8080"))
        #expect(local.allowsOrigin("http://127.0.0.1:8080", authority: "127.0.0.1:8080"))
        #expect(!local.allowsOrigin("http://evil.example", authority: "127.0.0.1:8080"))
        #expect(!local.allowsOrigin("http://localhost:8080", authority: "127.0.0.1:8080"))
        let lan = StageAccess(host: "192.168.1.5", port: 9000, token: "s3cret-token")
        #expect(lan.allowsHost("192.168.1.5:9000") && !lan.allowsHost("attacker.example:9000") && !lan.allowsHost("127.0.0.1:9000"))
        #expect(!lan.mayControl(token: nil) && !lan.mayControl(token: "s3cret-toke") && !lan.mayControl(token: "s3cret-token!"))
        #expect(lan.mayControl(token: "s3cret-token"))
        let everywhere = StageAccess(host: "0.0.0.0", port: 9000, token: "t0k3n-abc", localNames: ["stagebox"])
        #expect(everywhere.allowsHost("10.0.0.7:9000") && everywhere.allowsHost("stagebox:9000") && everywhere.allowsHost("localhost:9000"))
        #expect(everywhere.allowsHost("[fe80::1]:9000"))
        #expect(!everywhere.allowsHost("rebound.example:9000") && !everywhere.allowsHost("10.0.0.7:9001"))
        #expect(StageAccess.isLoopback("127.0.0.1") && StageAccess.isLoopback("localhost") && !StageAccess.isLoopback("127.0.0.2"))
        // Port 80 may go unwritten, in the Host and in the Origin alike.
        let web = StageAccess(host: "127.0.0.1", port: 80, token: nil)
        #expect(web.allowsHost("127.0.0.1") && web.allowsHost("localhost:80") && !web.allowsHost("127.0.0.1:8080"))
        #expect(web.allowsOrigin("http://127.0.0.1", authority: "127.0.0.1:80") && !web.allowsOrigin("http://127.0.0.1:81", authority: "127.0.0.1"))
        #expect(!local.allowsOrigin("https://127.0.0.1:8080", authority: "127.0.0.1:8080") && !local.allowsOrigin("http://127.0.0.1:8080.evil.example", authority: "127.0.0.1:8080"))
    }

    @Test("--web takes PORT, HOST:PORT or [IPv6]:PORT")
    func addresses() throws {
        let port = try StageConfiguration(parsing: "8080")
        #expect(port.host == "127.0.0.1" && port.port == 8080)
        let lan = try StageConfiguration(parsing: "0.0.0.0:0")
        #expect(lan.host == "0.0.0.0" && lan.port == 0)
        let v6 = try StageConfiguration(parsing: "[::1]:9000")
        #expect(v6.host == "::1" && v6.port == 9000)
        for bad in ["", "http://x", "host:", ":80", "1.2.3.4:70000", "::1:80", "[::1]80", "port"] {
            #expect(throws: AudioError.self, "\(bad)") { try StageConfiguration(parsing: bad) }
        }
    }

    @Test("The page compiled in is the page in Sources/LiveAudioStage/Web (scripts/stage-files.py was run)")
    func pageFiles() throws {
        let web = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Sources/LiveAudioStage/Web").standardized
        for (path, name) in StageAssets.sources {
            let onDisk = try Data(contentsOf: web.appendingPathComponent(name))
            let compiled = try #require(StageAssets.embedded.file(at: path))
            #expect(Array(onDisk) == compiled.bytes, "\(name) differs from StageFiles.swift: run scripts/stage-files.py")
        }
    }

    @Test("A monitor hands every follower the same snapshots; stop ends them; refresh takes one at once")
    func monitor() async throws {
        let counter = Locked(0)
        let monitor = SnapshotMonitor(interval: 0.01) { counter.withLock { c -> Int in c += 1; return c } }
        let a = monitor.updates()
        let b = monitor.updates()
        let first = monitor.latest
        async let seenA: [Int] = { var s: [Int] = []; for await v in a { s.append(v); if s.count == 5 { break } }; return s }()
        async let seenB: [Int] = { var s: [Int] = []; for await v in b { s.append(v); if s.count == 5 { break } }; return s }()
        let (x, y) = await (seenA, seenB)
        #expect(x.first! >= first && y.first! >= first)
        #expect(x == x.sorted() && y == y.sorted() && Set(x).count == 5)
        let refreshed = monitor.refresh()
        #expect(monitor.latest >= refreshed)
        monitor.stop()
        var after = 0
        for await _ in monitor.updates() { after += 1 }
        #expect(after == 0, "a follower after the stop ends at once")
        let taken = counter.withLock { $0 }
        try await Task.sleep(nanoseconds: 50_000_000)
        // (One taken while the stop came may still finish; none after it.)
        #expect(counter.withLock { $0 } <= taken + 1, "no snapshot after the stop")
    }
}
