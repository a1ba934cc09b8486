import AudioCore
import Foundation
import SingAlong
import Testing

@Suite("Song charts: UltraStar TXT and LRC lyrics")
struct SongChartTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    static func chart(_ text: String, folder: String = ".") throws(AudioError) -> SongChart {
        try SongChart.ultraStar(bytes: bytes(text), name: "song.txt", folder: folder)
    }

    /// The message of the error `body` throws, or a failed expectation when it throws none.
    static func failure(_ body: () throws(AudioError) -> Void) -> AudioError? {
        do throws(AudioError) {
            try body()
        } catch {
            return error
        }
        Issue.record("no error thrown")
        return nil
    }

    static let version1 = """
        #VERSION:1.1.0
        #TITLE:Song Title
        #ARTIST:Artist
        #MP3:Artist - Title.mp3
        #BPM:400
        #GAP:12345
        #GENRE:Pop, Rock, Punkfunk
        #CALCMEDLEY:on
        : 0 4 0 Hello
        : 8 4 0  World
        - 14
        * 16 4 5 gold
        F 22 2 0  free
        R 26 2 0  rap
        G 30 2 0  gap
        E
        : 40 4 0 after the end
        """

    @Test("Version 1: headers, beats to seconds, the note types, syllables with their spaces, lines, E ends it")
    func versionOne() throws {
        let chart = try Self.chart(Self.version1)
        #expect(chart.format == .ultraStar(version: "1.1.0"))
        #expect(chart.title == "Song Title" && chart.artist == "Artist")
        #expect(chart.headers["GENRE"] == "Pop, Rock, Punkfunk" && chart.headers["CALCMEDLEY"] == "on", "unknown headers kept")
        #expect(chart.beatsPerMinute == 400 && chart.gapMilliseconds == 12345)
        // A beat lasts 60 / (400 × 4) = 0.0375 s, from 12.345 s.
        #expect(abs(chart.time(ofBeat: 8) - (12.345 + 8 * 0.0375)) < 1e-12)
        #expect(abs(chart.beat(at: 12.345 + 0.375)! - 10) < 1e-9)
        let voice = try #require(chart.voice(1))
        #expect(chart.voices.count == 1 && voice.lines.count == 2)
        #expect(voice.lines[0].text == "Hello World", "the separating space kept in the syllable")
        #expect(voice.lines[0].syllables.map(\.text) == ["Hello", " World"])
        #expect(voice.lines[1].text == "gold free rap gap")
        let notes = voice.notes
        #expect(notes.map(\.kind) == [.normal, .normal, .golden, .freestyle, .rap, .goldenRap])
        #expect(notes.map(\.kind.scoreFactor) == [1, 1, 2, 0, 1, 2])
        #expect(notes[2].pitch == 5 && notes[2].midiNote == 65 && notes[2].sourceLine == 12)
        let gold = voice.lines[1].syllables[0]
        #expect(abs(gold.start - (12.345 + 16 * 0.0375)) < 1e-12 && abs(gold.end - (12.345 + 20 * 0.0375)) < 1e-12)
        #expect(abs(voice.lines[0].start - 12.345) < 1e-12 && abs(voice.lines[0].end - (12.345 + 12 * 0.0375)) < 1e-12)
        #expect(!voice.notes.contains { $0.startBeat == 40 }, "nothing after E")
        #expect(chart.warnings.isEmpty, "\(chart.warnings)")
    }

    @Test("A syllable keeps its trailing space: 'Hello ' + 'World' reads as 'Hello World'; a space alone is kept")
    func trailingSpaces() throws {
        let chart = try Self.chart("#TITLE:T\n#ARTIST:A\n#BPM:300\n: 0 4 0 Hello \n: 8 4 0 World\n: 12 2 0  \n: 14 2 0 again\n")
        #expect(chart.voices[0].syllables.map(\.text) == ["Hello ", "World", " ", "again"])
        #expect(chart.voices[0].lines[0].text == "Hello World again")
    }

    @Test("Unversioned files: CP1252 without a header (a warning), CP1252 and CP1250 named by #ENCODING, UTF-8 with a BOM")
    func encodings() throws {
        // "Café’s" in CP1252: é 0xE9, ’ 0x92.
        let latin: [UInt8] = Array("#TITLE:Caf".utf8) + [0xE9, 0x92] + Array("s\n#ARTIST:A\n#BPM:300\n: 0 2 0 Caf".utf8) + [0xE9] + Array("\nE\n".utf8)
        let guessed = try SongChart.ultraStar(bytes: latin, name: "old.txt")
        #expect(guessed.title == "Café’s" && guessed.format == .ultraStar(version: nil))
        #expect(guessed.voices[0].lines[0].text == "Café")
        #expect(guessed.warnings.contains { $0.contains("not UTF-8") && $0.contains("CP1252") })
        let named = try SongChart.ultraStar(bytes: Array("#ENCODING:CP1252\n".utf8) + latin, name: "old.txt")
        #expect(named.title == "Café’s" && named.warnings.isEmpty, "\(named.warnings)")
        // "Łódź" in CP1250: Ł 0xA3, ó 0xF3, ź 0x9F.
        let polish: [UInt8] = Array("#ENCODING:cp1250\n#TITLE:".utf8) + [0xA3, 0xF3, 0x64, 0x9F] + Array("\n#ARTIST:A\n#BPM:300\n: 0 2 0 x\n".utf8)
        #expect(try SongChart.ultraStar(bytes: polish).title == "Łódź")
        let bom = try SongChart.ultraStar(bytes: [0xEF, 0xBB, 0xBF] + Array("#TITLE:Ünïcode\r\n#ARTIST:A\r\n#BPM:300\r\n: 0 2 0 ü\r\nE\r\n".utf8))
        #expect(bom.title == "Ünïcode" && bom.voices[0].lines[0].text == "ü" && bom.warnings.isEmpty)
    }

    @Test("Duets: P1 and P2 with their names (#P1/#P2 or the older #DUETSINGERP1), each voice its own lines")
    func duet() throws {
        let chart = try Self.chart("""
            #TITLE:Duet
            #ARTIST:Two
            #BPM:300
            #P1:Alice
            #DUETSINGERP2:Bob
            P1
            : 0 4 0 One
            - 5
            : 6 4 2 two
            P2
            : 2 4 -3 Three
            P1
            : 12 2 0 four
            """)
        #expect(chart.voices.map(\.number) == [1, 2])
        #expect(chart.voice(1)?.name == "Alice" && chart.voice(2)?.name == "Bob")
        #expect(chart.voice(1)?.lines.map(\.text) == ["One", "twofour"])
        #expect(chart.voice(2)?.notes.map(\.pitch) == [-3])
    }

    @Test("#RELATIVE:yes: each line's beats count from the offsets before it")
    func relative() throws {
        let chart = try Self.chart("""
            #TITLE:R
            #ARTIST:A
            #BPM:300
            #RELATIVE:yes
            : 0 4 0 a
            - 6 8
            : 0 4 0 b
            - 5 10
            : 2 2 0 c
            """)
        #expect(chart.voices[0].notes.map(\.startBeat) == [0, 8, 20])
    }

    @Test("What other parsers let pass: unknown note types as freestyle, BPM changes ignored, a note of no length free, with warnings")
    func tolerated() throws {
        let chart = try Self.chart("""
            #TITLE:T
            #ARTIST:A
            #BPM:300,5
            : 0 4 0 a
            X 5 2 0 b
            B 8 200
            : 9 0 3 c
            """)
        #expect(chart.beatsPerMinute == 300.5, "a decimal comma")
        #expect(chart.voices[0].notes.map(\.kind) == [.normal, .freestyle, .freestyle])
        #expect(chart.warnings.contains { $0.hasPrefix("song.txt:5:") && $0.contains("'X'") })
        #expect(chart.warnings.contains { $0.hasPrefix("song.txt:6:") && $0.contains("BPM change") })
    }

    @Test("Refused only where no game could play it: no #BPM, no notes, an unknown version; naming the file, line and field")
    func badCharts() {
        let cases: [(String, String)] = [
            ("#TITLE:T\n#ARTIST:A\n: 0 4 0 a\n", "song.txt:3: #BPM: no such header before the notes (the tempo every note's time is counted in)"),
            ("#TITLE:T\n#ARTIST:A\n#BPM:fast\n: 0 4 0 a\n", "song.txt:3: #BPM 'fast' is not a positive number"),
            ("#TITLE:T\n#BPM:0\n: 0 4 0 a\n", "song.txt:2: #BPM '0' is not a positive number"),
            ("#TITLE:T\n#BPM:200000\n: 0 4 0 a\n", "song.txt:2: #BPM 200000 is above 100000"),
            ("#VERSION:2.0.0\n#BPM:300\n: 0 4 0 a\n", "song.txt:1: #VERSION 2.0.0: LiveAudio reads UltraStar format versions up to 1.x"),
            ("#TITLE:T\n#BPM:300\n", "song.txt:2: notes: none in the file (': beat length pitch syllable' lines) — nothing to sing"),
            ("#TITLE:T\n#BPM:300\n: 0 x 0 a\nE\n", "song.txt:4: notes: none in the file (': beat length pitch syllable' lines) — nothing to sing"),
        ]
        for (text, message) in cases {
            let error = Self.failure { () throws(AudioError) in _ = try SongChart.ultraStar(bytes: Self.bytes(text), name: "song.txt") }
            #expect(error?.code == .invalidChart)
            #expect(error?.message == message, "for \(text.debugDescription)")
        }
    }

    @Test("A line no game could read is skipped with a warning naming it; the chart loads")
    func skippedLines() throws {
        let cases: [(String, String)] = [
            ("#BPM:300\n#GAP:soon\n: 0 4 0 a\n", "song.txt:2: #GAP 'soon' is not a non-negative number: ignored"),
            ("#BPM:300\n#GAP:5000000000\n: 0 4 0 a\n", "song.txt:2: #GAP 5000000000 is beyond 1000000000: ignored"),
            ("#BPM:300\n: 9 4 0 a\n: 0 4 x b\n", "song.txt:3: the note's pitch 'x' is not a number: the note is skipped"),
            ("#BPM:300\n: 9 4 0 a\n: 0\n", "song.txt:3: the note has no length: the note is skipped"),
            ("#BPM:300\n: 9 4 0 a\n: 0 99999999999999 0 b\n", "song.txt:3: the note's length '99999999999999' is not a number: the note is skipped"),
            ("#BPM:300\n: 9 4 0 a\n: 0 4 500 b\n", "song.txt:3: the note's pitch 500 is out of range (-127 … 127): the note is skipped"),
            ("#BPM:300\n: 9 4 0 a\nP0\n", "song.txt:3: a voice change must be P1 … P9, got 'P0': ignored"),
            ("#BPM:300\n: 9 4 0 a\n- \n: 20 4 0 b\n", "song.txt:3: a line break ('-') without its beat: taken as a line break"),
            ("#BPM:300\n#RELATIVE:YES\n: 0 4 0 a\n- 6\n: 0 4 0 b\n", "song.txt:4: #RELATIVE:yes line breaks give two beats ('- beat offset'): the next line counted from beat 6 instead"),
            ("#BPM:300\n: 9 4 0 a\n  hello\n", "song.txt:3: 'hello' is neither a header, a note, a line break nor a voice change: ignored"),
        ]
        for (text, message) in cases {
            let chart = try SongChart.ultraStar(bytes: Self.bytes(text), name: "song.txt")
            #expect(chart.hasNotes)
            #expect(chart.warnings.contains(message), "for \(text.debugDescription): \(chart.warnings)")
        }
    }

    @Test("The song: #INSTRUMENTAL, else #AUDIO, else #MP3, relative to the chart's folder; a missing file names its header")
    func songFile() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("songchart-\(getpid())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        for name in ["full.mp3", "audio.ogg", "backing.wav"] {
            _ = FileManager.default.createFile(atPath: folder + "/" + name, contents: Data([0]))
        }
        let head = "#TITLE:T\n#ARTIST:A\n#BPM:300\n"
        let notes = ": 0 4 0 a\n"
        #expect(try Self.chart(head + "#MP3:full.mp3\n" + notes, folder: folder).songPath() == folder + "/full.mp3")
        #expect(try Self.chart(head + "#MP3:full.mp3\n#AUDIO:audio.ogg\n" + notes, folder: folder).songPath() == folder + "/audio.ogg")
        let all = try Self.chart(head + "#MP3:full.mp3\n#AUDIO:audio.ogg\n#INSTRUMENTAL:backing.wav\n#VOCALS:full.mp3\n" + notes, folder: folder)
        #expect(try all.songPath() == folder + "/backing.wav")
        #expect(try all.vocalsPath() == folder + "/full.mp3")
        let missing = Self.failure { () throws(AudioError) in
            _ = try Self.chart(head + "#MP3:gone.mp3\n#INSTRUMENTAL:gone.wav\n" + notes, folder: folder).songPath()
        }
        #expect(missing?.code == .fileIO && missing?.message == "#INSTRUMENTAL names 'gone.wav', which is not in \(folder)")
        // #AUDIO and #MP3 stand in for each other (and for #INSTRUMENTAL), a name in another case finds its file.
        let standIn = try Self.chart(head + "#MP3:full.mp3\n#INSTRUMENTAL:gone.wav\n" + notes, folder: folder).songReference()
        #expect(standIn.path == folder + "/full.mp3")
        #expect(standIn.warnings == ["#INSTRUMENTAL names 'gone.wav', which is not there: #MP3 'full.mp3' plays instead"])
        let mp3ForAudio = try Self.chart(head + "#AUDIO:gone.ogg\n#MP3:full.mp3\n" + notes, folder: folder).songReference()
        #expect(mp3ForAudio.path == folder + "/full.mp3" && mp3ForAudio.warnings.count == 1)
        let audioForMP3 = try Self.chart(head + "#AUDIO:audio.ogg\n#MP3:gone.mp3\n" + notes, folder: folder).songReference()
        #expect(audioForMP3.path == folder + "/audio.ogg" && audioForMP3.warnings.isEmpty, "#AUDIO comes first")
        let upper = try Self.chart(head + "#MP3:FULL.MP3\n" + notes, folder: folder).songReference()
        #expect(upper.path == folder + "/full.mp3")
        #expect(upper.warnings == ["#MP3 'FULL.MP3' found as 'full.mp3' (the name's case differs)"])
        let none = Self.failure { () throws(AudioError) in _ = try Self.chart(head + notes, folder: folder).songPath() }
        #expect(none?.code == .invalidChart && none?.message.contains("names no audio file") == true)
        let absolute = Self.failure { () throws(AudioError) in _ = try Self.chart(head + "#MP3:/etc/passwd\n" + notes, folder: folder).songPath() }
        #expect(absolute?.message.contains("not by absolute paths") == true)
        // load(path:) reads the file and takes its folder.
        let path = folder + "/chart.txt"
        _ = FileManager.default.createFile(atPath: path, contents: Data((head + "#MP3:full.mp3\n" + notes).utf8))
        #expect(try SongChart.load(path: path).songPath() == folder + "/full.mp3")
        let absent = Self.failure { () throws(AudioError) in _ = try SongChart.load(path: folder + "/nope.txt") }
        #expect(absent?.code == .fileIO && absent?.message == "no such file: \(folder)/nope.txt")
    }

    @Test("LRC: several time tags on a line, id tags, [offset:], enhanced word times, pauses, lines sorted by time")
    func lrc() throws {
        let text = """
            [ti:Song]
            [ar:Singer]
            [offset:+500]
            [00:12.00]First line
            [00:05.50][01:00.25]Chorus line
            [00:20.00]<00:20.00>Word <00:20.50>by <00:21.25>word
            [00:25.00]
            [00:30.000]Last

            """
        let chart = try SongChart.lrc(bytes: Self.bytes(text), name: "song.lrc")
        #expect(chart.format == .lrc && chart.title == "Song" && chart.artist == "Singer" && !chart.hasNotes)
        let lines = chart.voices[0].lines
        #expect(lines.map(\.text) == ["Chorus line", "First line", "Word by word", "Last", "Chorus line"])
        // Offset +500 ms: every time 0.5 s sooner.
        #expect(lines.map(\.start) == [5.0, 11.5, 19.5, 29.5, 59.75])
        #expect(lines[0].end == 11.5 && lines[2].end == 24.5, "a line ends where the next starts; an empty one is a pause")
        #expect(lines[2].syllables.map(\.text) == ["Word ", "by ", "word"])
        #expect(lines[2].syllables.map(\.start) == [19.5, 20.0, 20.75])
        #expect(lines[2].syllables.map(\.end) == [20.0, 20.75, 24.5])
        #expect(lines[4].end == 63.75, "the last line: 4 s")
        #expect(chart.beat(at: 10) == nil && chart.time(ofBeat: 4) == 0)
        // Word times later than the line's tag stay where they are written; at the line's other tags they move with it.
        let words = try SongChart.lrc(bytes: Self.bytes("[00:12.00][00:42.00]<00:12.50>Hello <00:13.00>world\n[00:20.00]x\n[00:50.00]y\n"), name: "w.lrc")
        let sung = words.voices[0].lines
        #expect(sung[0].start == 12 && sung[0].syllables.map(\.start) == [12.5, 13.0])
        #expect(sung[2].start == 42 && sung[2].syllables.map(\.start) == [42.5, 43.0])
    }

    @Test("Bad LRC: no timed line is refused; a bad tag skips its line, a bad offset is none, each with a warning")
    func badLRC() throws {
        let none = Self.failure { () throws(AudioError) in _ = try SongChart.lrc(bytes: Self.bytes("[ti:x]\njust text\n"), name: "song.lrc") }
        #expect(none?.code == .invalidChart && none?.message == "song.lrc:2: no timed line ([mm:ss.xx]text)")
        let cases: [(String, String)] = [
            ("[00:1x.00]a\n[00:02.00]b\n", "song.lrc:1: time tag '[00:1x.00]' is not mm:ss.xx: the line is skipped"),
            ("[offset:soon]\n[00:01.00]a\n", "song.lrc:1: [offset:soon] is not a number of milliseconds: no offset"),
            ("[00:01.00 a\n[00:02.00]b\n", "song.lrc:1: '[' without its ']': the line is skipped"),
        ]
        for (text, message) in cases {
            let chart = try SongChart.lrc(bytes: Self.bytes(text), name: "song.lrc")
            #expect(chart.warnings.contains(message), "for \(text.debugDescription): \(chart.warnings)")
        }
    }
}
