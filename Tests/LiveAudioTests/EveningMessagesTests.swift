import Foundation
import LiveAudio
import LiveAudioStage
import SingAlong
import SongLibrary
import TestSupport
import Testing

/// The evening's messages without a server: what phones and the host may ask (parsed, refused), who is a host, a
/// guest or a viewer, the join address's QR code (read back by zbarimg, as a phone's camera would), and the
/// presenter's answers over a real library.
@Suite("Evening messages, roles and the join code")
struct EveningMessagesTests {
    func parse(_ text: String) throws -> EveningRequest { try StageMessages.evening(text).request }

    func refusal(_ text: String) -> String? {
        do {
            _ = try StageMessages.evening(text)
            return nil
        } catch {
            return error.message
        }
    }

    @Test("Every evening action parses; anything else is refused with a reason, the id kept")
    func actions() throws {
        #expect(try parse(#"{"type":"evening","action":"join","name":"Ana","phone":"0123456789abcdef"}"#) == .join(name: "Ana", phone: "0123456789abcdef"))
        #expect(try parse(#"{"type":"evening","action":"search","text":"thek madch"}"#) == .search("thek madch"))
        #expect(try parse(#"{"type":"evening","action":"queue","song":12}"#) == .queue(song: 12, part: nil, partner: nil, key: nil, difficulty: nil, singer: nil))
        #expect(try parse(#"{"type":"evening","action":"queue","song":3,"part":2,"partner":"Ben","key":-2,"difficulty":"hard","singer":"Ana"}"#)
            == .queue(song: 3, part: 2, partner: "Ben", key: -2, difficulty: .hard, singer: "Ana"))
        #expect(try parse(#"{"type":"evening","action":"dequeue","entry":7}"#) == .dequeue(7))
        #expect(try parse(#"{"type":"evening","action":"move","entry":7,"position":1}"#) == .move(7, position: 1))
        #expect(try parse(#"{"type":"evening","action":"pauseQueue","on":true}"#) == .pauseQueue(true))
        #expect(try parse(#"{"type":"evening","action":"cap","songs":2}"#) == .cap(2))
        #expect(try StageMessages.evening(#"{"type":"evening","id":"x9","action":"search","text":""}"#).id == "x9")
        let cases: [(String, String)] = [
            (#"{"type":"control","action":"search","text":"a"}"#, "type must be \"evening\""),
            (#"{"type":"evening"}"#, "action is required"),
            (#"{"type":"evening","action":"fly"}"#, "unknown action \"fly\""),
            (#"{"type":"evening","action":"join","name":"Ana","phone":"short"}"#, "join: phone must be 16 … 64 letters, digits, - or _"),
            (#"{"type":"evening","action":"join","name":"Ana","phone":"0123456789abcdef<script>"}"#, "join: phone must be 16 … 64 letters, digits, - or _"),
            (#"{"type":"evening","action":"join","phone":"0123456789abcdef"}"#, "join: name is required"),
            (#"{"type":"evening","action":"search","text":5}"#, "search: text must be text"),
            (#"{"type":"evening","action":"queue","song":1.5}"#, "queue: song must be a whole number 1 … 9007199254740992"),
            (#"{"type":"evening","action":"queue","song":1,"key":13}"#, "queue: key must be a whole number -12 … 12"),
            (#"{"type":"evening","action":"queue","song":1,"difficulty":"insane"}"#, "queue: difficulty must be easy, medium or hard"),
            (#"{"type":"evening","action":"move","entry":1,"position":0}"#, "move: position must be a whole number 1 … 10000"),
            (#"{"type":"evening","action":"pauseQueue","on":"yes"}"#, "pauseQueue: on must be true or false"),
            (#"{"type":"evening","action":"cap","songs":51}"#, "cap: songs must be a whole number 1 … 50"),
            ("not json", "not a JSON message"),
            (#"{"type":"evening","action":"search","text":""# + String(repeating: "a", count: 5000) + #""}"#, "message too long: 5046 bytes, at most 4096"),
            (#"{"type":"evening","action":"search","text":""# + String(repeating: "a", count: 2000) + #""}"#, "search: text is longer than 1024 bytes"),
        ]
        for (text, message) in cases {
            #expect(refusal(text) == message, "for \(text.prefix(80))")
        }
    }

    @Test("Roles: the stage's token is the host, the join address's a guest, neither a viewer; no token needed: all hosts")
    func roles() {
        var access = StageAccess(host: "127.0.0.1", port: 8080, token: "host-token-123")
        access.guestToken = "guest-token-456"
        #expect(access.role(token: "host-token-123", guest: nil) == .host)
        #expect(access.role(token: nil, guest: "guest-token-456") == .guest)
        #expect(access.role(token: "host-token-124", guest: "guest-token-456") == .guest)
        #expect(access.role(token: nil, guest: "guest-token-457") == .viewer)
        #expect(access.role(token: nil, guest: nil) == .viewer)
        let open = StageAccess(host: "127.0.0.1", port: 8080, token: nil)
        #expect(open.role(token: nil, guest: nil) == .host)
    }

    @Test("The join code: a QR symbol of the address, read back by zbarimg; an SVG the page shows")
    func qrCode() throws {
        let url = "http://192.168.1.20:8080/join?guest=0123456789abcdef0123456789abcdef"
        let code = try QRCode(url)
        #expect(code.size >= 21 && (code.size - 17) % 4 == 0, "a version's size: 17 + 4 × version")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Data(code.pgm()).write(to: URL(fileURLWithPath: dir.file("join.pgm")))
        let read = try runProcess("zbarimg", ["--quiet", "--raw", dir.file("join.pgm")])
        #expect(read.status == 0, "\(read.stderr)")
        #expect(read.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == url)
        #expect(code.svg.hasPrefix("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 \(code.size + 8) \(code.size + 8)\""))
        #expect(throws: AudioError.self) { _ = try QRCode("") }
    }

    @Test("The presenter's answers over a library: join, search, queue, a guest's limits, the host's, a viewer's none")
    func presenter() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.file("songs/A"), withIntermediateDirectories: true)
        try Data([0]).write(to: URL(fileURLWithPath: dir.file("songs/A/a.mp3")))
        try "#TITLE:Thekenmädchen\n#ARTIST:Die Tresen\n#MP3:a.mp3\n#BPM:300\n: 0 4 0 la\nE\n".write(toFile: dir.file("songs/A/a.txt"), atomically: true, encoding: .utf8)
        let library = try SongLibrary(path: dir.file("library.sqlite"), access: .writer)
        _ = try library.scan([dir.file("songs")])
        let room = try KaraokeRoom(KaraokeRoom.Configuration())
        let presenter = EveningPresenter(room: KaraokeRoomPresenter(room: room, take: nil, title: "Tonight"), library: library, gap: 5)
        #expect(presenter.evening(.search("thek"), role: .viewer, singer: nil).error?.contains("join address") == true)
        let joined = presenter.evening(.join(name: "<b>Ana</b>", phone: "phone-ana-0123456789"), role: .guest, singer: nil)
        let ana = try #require(joined.singer)
        #expect(joined.data?.contains(#""name":"\u003cb>Ana\u003c/b>""#) == true, "\(joined.data ?? "")")
        let found = presenter.evening(.search("thekenmadchen"), role: .guest, singer: ana)
        #expect(found.error == nil && found.data?.contains("\"title\":\"Thekenmädchen\"") == true)
        let song = try #require(library.songs().first?.id)
        #expect(presenter.evening(.queue(song: song, part: nil, partner: nil, key: nil, difficulty: nil, singer: nil), role: .guest, singer: nil).error == "enter your name first")
        let queued = presenter.evening(.queue(song: song, part: nil, partner: nil, key: 2, difficulty: .easy, singer: nil), role: .guest, singer: ana)
        #expect(queued.error == nil, "\(queued.error ?? "")")
        let ben = try #require(presenter.evening(.join(name: "Ben", phone: "phone-ben-0123456789"), role: .guest, singer: nil).singer)
        let entry = try #require(library.queue().first?.id)
        #expect(presenter.evening(.dequeue(entry), role: .guest, singer: ben).error == "a phone removes its own songs only")
        #expect(presenter.evening(.move(entry, position: 1), role: .guest, singer: ana).error?.hasPrefix("only the host") == true)
        #expect(presenter.evening(.pauseQueue(true), role: .host, singer: nil).error == nil)
        #expect(try library.isPaused())
        // The queue's message: the names as text in JSON (with < escaped), never markup.
        let queue = try #require(presenter.events(room.snapshot()).first { $0.type == "queue" }?.json)
        #expect(queue.contains(#""name":"\u003cb>Ana\u003c/b>""#) && queue.contains("\"paused\":true") && queue.contains("\"key\":2"), "\(queue)")
        #expect(presenter.evening(.dequeue(entry), role: .guest, singer: ana).error == nil)
        #expect(try library.queue().isEmpty)
        #expect(presenter.hello(role: .guest).contains("\"role\":\"guest\",\"evening\":true}"))
    }
}
