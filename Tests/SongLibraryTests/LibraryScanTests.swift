import AudioCore
import Foundation
import SongLibrary
import Testing
import TestSupport

/// A folder of songs written for a test: UltraStar folders, plain audio, and what real libraries hold besides.
struct SongFolder {
    let root: String

    init(_ directory: TemporaryDirectory) throws {
        root = directory.file("songs")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    }

    static func chart(title: String, artist: String, audio: String, extra: String = "", notes: String = ": 0 4 0 la\n: 4 4 2 la\n- 10\n: 12 4 0 end\n") -> String {
        "#VERSION:1.0.0\n#TITLE:\(title)\n#ARTIST:\(artist)\n#AUDIO:\(audio)\n#BPM:300\n#GAP:1000\n\(extra)\(notes)E\n"
    }

    /// Writes `contents` at `path` (below the root), making its folders.
    func write(_ path: String, _ contents: String) throws { try write(path, Data(contents.utf8)) }

    func write(_ path: String, _ contents: Data) throws {
        let full = root + "/" + path
        try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try contents.write(to: URL(fileURLWithPath: full))
    }

    /// An UltraStar song folder: the chart and a stand-in audio file.
    func song(_ folder: String, title: String, artist: String, extra: String = "", notes: String? = nil) throws {
        let audio = "\(artist) - \(title).mp3"
        try write("\(folder)/\(audio)", Data([0]))
        let text = notes.map { Self.chart(title: title, artist: artist, audio: audio, extra: extra, notes: $0) }
            ?? Self.chart(title: title, artist: artist, audio: audio, extra: extra)
        try write("\(folder)/\(artist) - \(title).txt", text)
    }
}

@Suite("The song library: scan, rescan, search, list")
struct LibraryScanTests {
    /// A library of nine songs with the oddities a real one has.
    static func makeLibrary(_ dir: TemporaryDirectory) throws -> SongFolder {
        let songs = try SongFolder(dir)
        try songs.song("T/Tresen/Thekenmädchen", title: "Thekenmädchen", artist: "Die Tresen", extra: "#LANGUAGE:German\n#GENRE:Schlager\n#YEAR:1998\n#EDITION:Party\n")
        try songs.song("S/Sol/Corazón", title: "Corazón de Melón", artist: "Sol y Sombra", extra: "#LANGUAGE:Spanish\n")
        try songs.song("D/Duet/Two", title: "Two Hearts", artist: "Ana & Ben", extra: "#P1:Ana\n#P2:Ben\n", notes: "P1\n: 0 4 0 a\nP2\n: 8 4 0 b\n")
        // A chart people wrote: overlapping notes, lower-case keys, no E.
        try songs.write("W/Wild/song.txt", "#title:Wild One\n#artist:Raw\n#bpm:200\n#mp3:wild.mp3\n: 0 8 0 a\n: 4 4 0 b\n")
        try songs.write("W/Wild/wild.mp3", Data([0]))
        // UTF-16 with a byte order mark.
        var utf16 = Data([0xFF, 0xFE])
        for unit in SongFolder.chart(title: "Grüße", artist: "Zoë", audio: "g.ogg").utf16 { utf16.append(contentsOf: [UInt8(unit & 0xFF), UInt8(unit >> 8)]) }
        try songs.write("G/Grusse/g.txt", utf16)
        try songs.write("G/Grusse/g.ogg", Data([0]))
        // Plain audio: one with an LRC, one without.
        try songs.write("Plain/Singer - With Words.ogg", Data([0]))
        try songs.write("Plain/Singer - With Words.lrc", "[ti:With Words]\n[ar:The Singer]\n[00:01.00]One\n[00:03.50]Two\n")
        try songs.write("Plain/Nobody - Hums.mp3", Data([0]))
        // Broken: no #BPM; a missing audio file. Not charts: a README, a 2 MB file named .txt.
        try songs.write("Broken/nobpm.txt", "#TITLE:No Tempo\n#ARTIST:A\n#MP3:x.mp3\n: 0 4 0 a\nE\n")
        try songs.write("Broken/x.mp3", Data([0]))
        try songs.write("NoAudio/song.txt", SongFolder.chart(title: "Silent", artist: "Nobody", audio: "gone.mp3"))
        try songs.write("README.txt", "Songs for the party.\n")
        try songs.write("huge.txt", Data(repeating: 0x41, count: 2 << 20))
        return songs
    }

    @Test("A first scan: charts and plain audio indexed, broken ones kept with reasons, non-charts passed over quietly")
    func firstScan() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let songs = try Self.makeLibrary(dir)
        let library = try SongLibrary(path: dir.file("library.sqlite"), access: .writer)
        let report = try library.scan([songs.root])
        #expect(report.added == 9 && report.updated == 0 && report.removed == 0, "\(report)")
        #expect(try library.count() == 7)
        #expect(Set(report.broken.map { ($0.path as NSString).lastPathComponent }) == ["nobpm.txt", "song.txt"])
        #expect(report.broken.contains { $0.reason.contains("#BPM: no such header") })
        #expect(report.broken.contains { $0.reason == "#AUDIO names 'gone.mp3', which is not in \(songs.root)/NoAudio" })
        #expect(report.skipped.map { ($0.path as NSString).lastPathComponent } == ["huge.txt"])
        #expect(report.skipped.first?.reason == "2 MB: too large for a chart (charts are under 1 MB)")

        let all = try library.songs()
        let byTitle = Dictionary(uniqueKeysWithValues: all.map { ($0.title, $0) })
        #expect(Set(byTitle.keys) == ["Thekenmädchen", "Corazón de Melón", "Two Hearts", "Wild One", "Grüße", "With Words", "Hums"])
        let theken = try #require(byTitle["Thekenmädchen"])
        #expect(theken.artist == "Die Tresen" && theken.language == "German" && theken.genre == "Schlager" && theken.year == 1998 && theken.edition == "Party")
        #expect(theken.kind == .ultraStar && theken.parts == [1] && !theken.isDuet && theken.bpm == 300)
        // Length from the chart: the last note ends at beat 16, 1 s + 16 × 0.05 s.
        #expect(abs((theken.length ?? 0) - 1.8) < 1e-9)
        #expect(theken.audio == songs.root + "/T/Tresen/Thekenmädchen/Die Tresen - Thekenmädchen.mp3")
        let duet = try #require(byTitle["Two Hearts"])
        #expect(duet.isDuet && duet.parts == [1, 2] && duet.singers == ["Ana", "Ben"])
        let wild = try #require(byTitle["Wild One"])
        #expect(wild.warnings.contains { $0.contains("shortened") } && wild.warnings.contains { $0.contains("no 'E'") })
        #expect(byTitle["Grüße"]?.artist == "Zoë")
        let words = try #require(byTitle["With Words"])
        #expect(words.kind == .audio && words.artist == "The Singer" && words.lyrics == songs.root + "/Plain/Singer - With Words.lrc")
        #expect(abs((words.length ?? 0) - 7.5) < 1e-9, "the last LRC line: 4 s")
        let hums = try #require(byTitle["Hums"])
        #expect(hums.artist == "Nobody" && hums.lyrics == nil && hums.length == nil && hums.isPlayable)
        // Broken songs are listed with their reasons, never offered.
        #expect(try library.brokenSongs().count == 2)
        #expect(try library.search("silent").isEmpty)
        #expect(try library.search("tempo").isEmpty)
    }

    @Test("Search: words in any order, prefixes as you type, accents and case folded, over every text field")
    func search() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let songs = try Self.makeLibrary(dir)
        let library = try SongLibrary(path: dir.file("library.sqlite"), access: .writer)
        _ = try library.scan([songs.root])
        func titles(_ text: String) throws -> [String] { try library.search(text).map(\.title) }
        #expect(try titles("thekenmadchen") == ["Thekenmädchen"])
        #expect(try titles("THEKENMÄDCHEN") == ["Thekenmädchen"])
        #expect(try titles("thek") == ["Thekenmädchen"])
        #expect(try titles("tresen die") == ["Thekenmädchen"], "words in any order")
        #expect(try titles("t") .contains("Thekenmädchen"))
        #expect(try titles("corazon melon") == ["Corazón de Melón"])
        #expect(try titles("spanish") == ["Corazón de Melón"], "language")
        #expect(try titles("schlager 1998") == ["Thekenmädchen"], "genre and year")
        #expect(try titles("ben") == ["Two Hearts"], "a duet's singer")
        #expect(try titles("zoe") == ["Grüße"])
        #expect(try titles("thek nothing").isEmpty, "every word must match")
        #expect(try library.search("").count == 7, "no words: every playable song")
        // Any text is safe: FTS5 syntax and SQL are words like any other.
        for hostile in ["\"", "\"\"*", "NEAR(a b)", "a OR b", "title:x", "'; DROP TABLE song; --", "*", "-", "^a", "(((", "\u{0}", String(repeating: "ä", count: 5000)] {
            _ = try library.search(hostile)
        }
        #expect(try library.count() == 7)
    }

    @Test("A rescan reads only what changed: nothing changed; one changed, one added, one removed; ids and hashes kept")
    func rescan() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let songs = try Self.makeLibrary(dir)
        let library = try SongLibrary(path: dir.file("library.sqlite"), access: .writer)
        _ = try library.scan([songs.root])
        let before = try library.songs()
        let again = try library.scan([])
        #expect(again.added == 0 && again.updated == 0 && again.removed == 0 && again.unchanged == 9, "\(again)")
        #expect(try library.songs() == before)

        // Changed: Corazón gets another genre (its notes stay: same hash, same id). Added: one. Removed: Hums.
        // Moved: Thekenmädchen to another folder (a new row, the same hash).
        let corazon = before.first { $0.title == "Corazón de Melón" }!
        try songs.write("S/Sol/Corazón/Sol y Sombra - Corazón de Melón.txt", SongFolder.chart(title: "Corazón de Melón", artist: "Sol y Sombra", audio: "Sol y Sombra - Corazón de Melón.mp3", extra: "#GENRE:Latin\n"))
        try songs.song("N/New/Fresh", title: "Fresh", artist: "New Band")
        try FileManager.default.removeItem(atPath: songs.root + "/Plain/Nobody - Hums.mp3")
        let theken = before.first { $0.title == "Thekenmädchen" }!
        try FileManager.default.moveItem(atPath: songs.root + "/T/Tresen", toPath: songs.root + "/T/Moved")
        let changed = try library.scan([songs.root])
        #expect(changed.added == 2 && changed.updated == 1 && changed.removed == 2, "\(changed)")
        let after = try library.songs()
        let newCorazon = after.first { $0.title == "Corazón de Melón" }!
        #expect(newCorazon.id == corazon.id && newCorazon.genre == "Latin" && newCorazon.hash == corazon.hash)
        let moved = after.first { $0.title == "Thekenmädchen" }!
        #expect(moved.path.contains("/T/Moved/") && moved.hash == theken.hash, "the notes' hash follows the file")
        #expect(!after.contains { $0.title == "Hums" } && after.contains { $0.title == "Fresh" })
        // The search index follows updates, moves and removals (a ranked search reads every match's sizes).
        #expect(try library.search("corazon latin").map(\.title) == ["Corazón de Melón"])
        #expect(try library.search("melon").map(\.title) == ["Corazón de Melón"])
        #expect(try library.search("thekenmadchen").map(\.path) == [moved.path])
        #expect(try library.search("hums").isEmpty)
        // The hash is the notes': the same notes under another name are the same song, one changed note another.
        #expect(newCorazon.hash == after.first { $0.title == "Fresh" }!.hash)
        try songs.write("N/New/Fresh/New Band - Fresh.txt", SongFolder.chart(title: "Fresh", artist: "New Band", audio: "New Band - Fresh.mp3", notes: ": 0 4 0 la\n: 4 4 3 la\n- 10\n: 12 4 0 end\n"))
        _ = try library.scan([songs.root])
        #expect(try library.songs().first { $0.title == "Fresh" }!.hash != newCorazon.hash)
        for word in ["a", "la", "new", "fresh", "sol", "zoe"] { _ = try library.search(word) }
    }

    @Test("A library larger than a batch: rows written while the walk goes on are neither lost nor taken for gone")
    func batches() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let songs = try SongFolder(dir)
        for i in 0..<1300 {
            try songs.song("\(i % 7)/A\(i)/S\(i)", title: "Song \(i)", artist: "Artist \(i)", notes: ": 0 4 \(i % 12) la\n: 4 4 0 \(i)\n")
        }
        let library = try SongLibrary(path: dir.file("library.sqlite"), access: .writer)
        let first = try library.scan([songs.root])
        #expect(first.added == 1300 && first.removed == 0 && first.unchanged == 0, "\(first)")
        #expect(try library.count() == 1300)
        let again = try library.scan([])
        #expect(again.unchanged == 1300 && again.added == 0 && again.removed == 0, "\(again)")
        for folder in ["3", "5"] { try FileManager.default.removeItem(atPath: songs.root + "/" + folder) }
        let fewer = try library.scan([])
        #expect(fewer.removed == 371 && fewer.unchanged == 929, "\(fewer)")
        #expect(try library.count() == 929)
        #expect(try library.search("artist 1299").map(\.title) == ["Song 1299"])
        // Every song changed: updated in place, the index with it.
        for i in 0..<1300 where i % 7 != 3 && i % 7 != 5 {
            try songs.write(
                "\(i % 7)/A\(i)/S\(i)/Artist \(i) - Song \(i).txt",
                SongFolder.chart(title: "Song \(i) again", artist: "Artist \(i)", audio: "Artist \(i) - Song \(i).mp3", notes: ": 0 4 \(i % 12) la\n: 4 4 0 \(i)\n"))
        }
        let changed = try library.scan([])
        #expect(changed.updated == 929 && changed.removed == 0, "\(changed)")
        #expect(try library.search("song 12 again", limit: 100).count == 78, "ranked: fewer than \(SongLibrary.rankedMatchLimit) match")
        #expect(try library.search("song").count == 50)
    }

    @Test("A symlink loop and a dangling symlink are reported and passed over; a folder's songs found once")
    func symlinks() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let songs = try SongFolder(dir)
        try songs.song("A/One", title: "One", artist: "X")
        try FileManager.default.createSymbolicLink(atPath: songs.root + "/A/One/loop", withDestinationPath: songs.root + "/A")
        try FileManager.default.createSymbolicLink(atPath: songs.root + "/A/nowhere", withDestinationPath: songs.root + "/gone")
        let library = try SongLibrary(path: dir.file("library.sqlite"), access: .writer)
        let report = try library.scan([songs.root])
        #expect(report.added == 1)
        #expect(report.skipped.contains { $0.path.hasSuffix("/A/One/loop") && $0.reason.contains("symlink loop") }, "\(report.skipped)")
        #expect(report.skipped.contains { $0.path.hasSuffix("/A/nowhere") && $0.reason == "a symlink to nothing" })
    }

    @Test("A folder the scanning user cannot read is reported, the scan goes on, and its songs are kept")
    func unreadableFolder() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let songs = try SongFolder(dir)
        try songs.song("Open/One", title: "One", artist: "X")
        try songs.song("Closed/Two", title: "Two", artist: "Y")
        try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: dir.path)
        let db = dir.file("library.sqlite")
        let first = try runProcess(productsDirectory + "/liveaudio", ["library", "scan", songs.root, "--db", db])
        #expect(first.status == 0 && first.stdout.contains("2 songs in"), "\(first.stdout)\(first.stderr)")
        // The scan again by a user who cannot open Closed/: as root (CI), the scan runs as nobody (root reads any
        // folder); as another user, the folder is closed to its owner.
        let asNobody: ProcessResult
        if getuid() == 0 {
            for path in [dir.path, songs.root, songs.root + "/Open", songs.root + "/Open/One"] {
                try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path)
            }
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: songs.root + "/Closed")
            for file in [db, db + "-wal", db + "-shm", db + ".lock"] where FileManager.default.fileExists(atPath: file) {
                try FileManager.default.setAttributes([.posixPermissions: 0o666], ofItemAtPath: file)
            }
            try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: dir.path)
            asNobody = try runProcess(
                "/usr/bin/setpriv",
                ["--reuid=65534", "--regid=65534", "--clear-groups", productsDirectory + "/liveaudio", "library", "scan", songs.root, "--db", db])
        } else {
            try FileManager.default.setAttributes([.posixPermissions: 0o000], ofItemAtPath: songs.root + "/Closed")
            defer { try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: songs.root + "/Closed") }
            asNobody = try runProcess(productsDirectory + "/liveaudio", ["library", "scan", songs.root, "--db", db])
        }
        #expect(asNobody.status == 0, "\(asNobody.stdout)\(asNobody.stderr)")
        #expect(asNobody.stdout.contains("skipped: \(songs.root)/Closed: cannot read the folder: Permission denied"), "\(asNobody.stdout)")
        #expect(asNobody.stdout.contains("2 songs in") && asNobody.stdout.contains("0 removed"), "the unreadable folder's song kept: \(asNobody.stdout)")
    }

    @Test("One writer at a time: a second gets a clear message; readers go on; a file that is no library is refused")
    func oneWriter() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let songs = try Self.makeLibrary(dir)
        let db = dir.file("library.sqlite")
        let library = try SongLibrary(path: db, access: .writer)
        _ = try library.scan([songs.root])
        let second = try runProcess(productsDirectory + "/liveaudio", ["library", "scan", songs.root, "--db", db])
        #expect(second.status == 1)
        #expect(second.stderr.contains("the song library \(db) is in use by another liveaudio (process \(getpid())): stop it first, or give this one another with --db"), "\(second.stderr)")
        let reader = try runProcess(productsDirectory + "/liveaudio", ["library", "search", "thek", "--db", db])
        #expect(reader.status == 0 && reader.stdout.contains("Thekenmädchen"), "\(reader.stderr)")
        // In this process too.
        #expect(throws: AudioError.self) { _ = try SongLibrary(path: db, access: .writer) }

        try Data("this is not a database, just text that is long enough to be read as a header......".utf8).write(to: URL(fileURLWithPath: dir.file("other.sqlite")))
        let other = try runProcess(productsDirectory + "/liveaudio", ["library", "list", "--db", dir.file("other.sqlite")])
        #expect(other.status == 1 && other.stderr.contains("is not a song library") && other.stderr.contains("--db"), "\(other.stderr)")
    }

    @Test("The command line: list --json prints the playable songs; the default file is in $XDG_DATA_HOME/liveaudio")
    func commandLine() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let songs = try Self.makeLibrary(dir)
        let environment = ["XDG_DATA_HOME": dir.file("data")]
        let scan = try runProcess(productsDirectory + "/liveaudio", ["library", "scan", songs.root], environment: environment)
        #expect(scan.status == 0, "\(scan.stderr)")
        #expect(FileManager.default.fileExists(atPath: dir.file("data/liveaudio/library.sqlite")))
        #expect(scan.stdout.contains("broken: \(songs.root)/Broken/nobpm.txt:"))
        #expect(scan.stdout.contains("7 songs in \(dir.file("data/liveaudio/library.sqlite")): 9 added, 0 updated, 0 unchanged, 0 removed; 2 broken, 1 skipped"), "\(scan.stdout)")
        let list = try runProcess(productsDirectory + "/liveaudio", ["library", "list", "--json"], environment: environment)
        #expect(list.status == 0)
        let array = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
        #expect(array.count == 7)
        let duet = try #require(array.first { $0["title"] as? String == "Two Hearts" })
        #expect(duet["duet"] as? Bool == true && duet["singers"] as? [String] == ["Ana", "Ben"] && duet["parts"] as? [Int] == [1, 2])
        #expect(array.allSatisfy { ($0["hash"] as? String)?.count == 32 && $0["audio"] is String && $0["id"] is Int })
        let broken = try runProcess(productsDirectory + "/liveaudio", ["library", "list", "--broken"], environment: environment)
        #expect(broken.stdout.contains("NoAudio/song.txt: #AUDIO names 'gone.mp3'"))
        let search = try runProcess(productsDirectory + "/liveaudio", ["library", "search", "corazon", "--json"], environment: environment)
        #expect(search.stdout.contains("\"title\" : \"Corazón de Melón\""), "\(search.stdout)")
        let none = try runProcess(productsDirectory + "/liveaudio", ["library", "scan", "--db", dir.file("empty.sqlite")])
        #expect(none.status == 1 && none.stderr.contains("no folder to scan: name one"))
    }
}
