import AudioCore
import Foundation
import SingAlong
import Testing

/// Charts as people write and share them: each oddity seen in real UltraStar and LRC files, in a chart written here
/// for it, loads as UltraStar Deluxe plays it, with a warning that names the file and the line.
@Suite("Charts from the wild: every oddity loads, with its warning")
struct ChartOdditiesTests {
    static func load(_ text: String, name: String = "wild.txt") throws -> SongChart {
        try SongChart.ultraStar(bytes: Array(text.utf8), name: name)
    }

    static func loadLRC(_ text: String) throws -> SongChart {
        try SongChart.lrc(bytes: Array(text.utf8), name: "wild.lrc")
    }

    /// True when some warning starts with `file:line:` and contains `words`.
    static func warned(_ chart: SongChart, line: Int, _ words: String, file: String = "wild.txt") -> Bool {
        chart.warnings.contains { $0.hasPrefix("\(file):\(line): ") && $0.contains(words) }
    }

    static let head = "#TITLE:Odd\n#ARTIST:Someone\n#BPM:300\n"

    @Test("A note overlapping the one before by a beat or more: the earlier one is shortened to end where it starts")
    func overlap() throws {
        let chart = try Self.load(Self.head + ": 0 6 0 a\n: 4 4 2 b\n: 8 1 0 c\n: 8 2 0 d\nE\n")
        let notes = chart.voices[0].notes
        #expect(notes.map(\.startBeat) == [0, 4, 8, 8])
        #expect(notes.map(\.beats) == [4, 4, 0, 2])
        #expect(notes[2].kind == .freestyle, "shortened to nothing: no points")
        #expect(Self.warned(chart, line: 5, "starts 2 beats before the one at beat 0 (line 4) ends: that one shortened to 4"))
        #expect(Self.warned(chart, line: 7, "starts 1 beat before"))
        // Times follow the shortened beats: a beat is 60 / (300 × 4) = 0.05 s.
        #expect(abs(chart.voices[0].syllables[0].end - 0.2) < 1e-12)
    }

    @Test("A line break placed before the note before it ends: a warning, the lines as written")
    func earlyLineBreak() throws {
        let chart = try Self.load(Self.head + ": 0 8 0 a\n- 4\n: 10 2 0 b\nE\n")
        #expect(chart.voices[0].lines.map(\.text) == ["a", "b"])
        #expect(Self.warned(chart, line: 5, "the line break at beat 4 comes before the note before it (line 4) ends at beat 8"))
    }

    @Test("Notes out of order: sorted by beat, each into the line its beat falls in")
    func outOfOrder() throws {
        let chart = try Self.load(Self.head + ": 4 2 0 two\n: 0 2 0 one\n- 8\n: 20 2 0 four\n- 22\n: 10 2 0 three\nE\n")
        let voice = chart.voices[0]
        #expect(voice.notes.map(\.startBeat) == [0, 4, 10, 20])
        #expect(voice.lines.map { $0.syllables.map(\.text) } == [["one", "two"], ["three"], ["four"]])
        #expect(Self.warned(chart, line: 5, "the note at beat 0 comes after the one at beat 4 (line 4): notes sorted by beat"))
        #expect(voice.lines.allSatisfy { $0.start <= $0.end })
    }

    @Test("A note of no length: freestyle (no points), as UltraStar Deluxe reads it")
    func zeroLength() throws {
        let chart = try Self.load(Self.head + ": 0 4 0 a\n: 4 0 0 b\n: 6 2 0 c\nE\n")
        #expect(chart.voices[0].notes.map(\.kind) == [.normal, .freestyle, .normal])
        #expect(Self.warned(chart, line: 5, "a note of no length: read as freestyle"))
    }

    @Test("Negative beats, and a P2 starting at beat -1: kept, sung before #GAP")
    func negativeBeats() throws {
        let chart = try Self.load("#TITLE:Duet\n#ARTIST:Two\n#BPM:300\n#GAP:1000\n#P1:A\n#P2:B\nP1\n: -3 2 0 early\n: 0 4 0 a\nP2\n: -1 2 0 b\n: 4 2 0 c\nE\n")
        #expect(chart.voice(1)?.notes.first?.startBeat == -3 && chart.voice(2)?.notes.first?.startBeat == -1)
        #expect(abs(chart.voice(2)!.syllables[0].start - 0.95) < 1e-12, "#GAP 1 s, one beat of 0.05 s before it")
        #expect(Self.warned(chart, line: 8, "P1 begins at beat -3, before beat 0"))
        #expect(Self.warned(chart, line: 11, "P2 begins at beat -1, before beat 0"))
    }

    @Test("Decimal commas in any number: #BPM:71,25, #GAP, #START:9,5, #VIDEOGAP:-7,4 kept as written")
    func decimalCommas() throws {
        let chart = try Self.load("#TITLE:T\n#ARTIST:A\n#BPM:71,25\n#GAP:1234,5\n#START:9,5\n#VIDEOGAP:-7,4\n: 0 4 0 a\n")
        #expect(chart.beatsPerMinute == 71.25 && chart.gapMilliseconds == 1234.5 && chart.startSeconds == 9.5)
        #expect(chart.headers["VIDEOGAP"] == "-7,4")
        #expect(Self.warned(chart, line: 3, "#BPM '71,25' has a decimal comma: read as 71.25"))
        #expect(Self.warned(chart, line: 5, "#START '9,5' has a decimal comma"))
    }

    @Test("Lower-case keys and values: #relative:yes, #bpm, #title")
    func lowerCase() throws {
        let chart = try Self.load("#title:Small\n#artist:Letters\n#bpm:300\n#relative:yes\n: 0 4 0 a\n- 6 8\n: 0 4 0 b\nE\n")
        #expect(chart.title == "Small" && chart.beatsPerMinute == 300)
        #expect(chart.voices[0].notes.map(\.startBeat) == [0, 8], "relative beats")
        #expect(Self.warned(chart, line: 1, "#title is not in capitals: read as #TITLE"))
        #expect(Self.warned(chart, line: 4, "#RELATIVE:yes read as YES"))
    }

    @Test("'P 1' for P1, '-25' with no space, text after E, no E at all")
    func looseBody() throws {
        let chart = try Self.load("#TITLE:D\n#ARTIST:A\n#BPM:300\n#P1:A\n#P2:B\nP 1\n: 0 4 0 a\n-25\n: 26 2 0 b\nP 2\n: 2 2 0 c\nE the end, with thanks\n: 90 2 0 after\n")
        #expect(chart.voices.map(\.number) == [1, 2])
        #expect(chart.voice(1)?.lines.map(\.text) == ["a", "b"])
        #expect(!chart.voices.contains { $0.notes.contains { $0.startBeat == 90 } })
        #expect(Self.warned(chart, line: 6, "'P 1' read as P1"))
        #expect(Self.warned(chart, line: 8, "'-25' has no space after '-': read as a line break at beat 25"))
        #expect(Self.warned(chart, line: 12, "text after 'E' on its line: ignored"))
        let open = try Self.load(Self.head + ": 0 4 0 a\n: 4 4 0 b")
        #expect(open.voices[0].notes.count == 2)
        #expect(Self.warned(open, line: 5, "no 'E' ends the notes"))
    }

    @Test("CR-only and mixed line ends, blank lines inside the body")
    func lineEnds() throws {
        let crOnly = try Self.load("#TITLE:T\r#ARTIST:A\r#BPM:300\r: 0 4 0 a\r- 5\r: 6 2 0 b\rE\r")
        #expect(crOnly.voices[0].lines.map(\.text) == ["a", "b"])
        #expect(Self.warned(crOnly, line: 1, "CR-only line ends"))
        let mixed = try Self.load("#TITLE:T\r\n#ARTIST:A\n#BPM:300\r: 0 4 0 a\n\n\r\n: 6 2 0 b\r\nE\n")
        #expect(mixed.voices[0].notes.count == 2)
        #expect(Self.warned(mixed, line: 1, "mixed line ends (LF, CR LF, CR)"))
        #expect(Self.warned(mixed, line: 5, "a blank line among the notes: skipped"))
    }

    @Test("Encodings: UTF-16 LE and BE with a byte order mark, 8-bit with no #ENCODING, UTF-8 whose one non-ASCII character is °")
    func encodings() throws {
        let text = "#TITLE:Grüße aus Köln\n#ARTIST:Zoë\n#BPM:300\n: 0 4 0 Grü\n: 4 4 0 ße\nE\n"
        for (bom, bigEndian) in [([UInt8(0xFF), 0xFE], false), ([UInt8(0xFE), 0xFF], true)] {
            var bytes = bom
            for unit in text.utf16 {
                bytes += bigEndian ? [UInt8(unit >> 8), UInt8(unit & 0xFF)] : [UInt8(unit & 0xFF), UInt8(unit >> 8)]
            }
            let chart = try SongChart.ultraStar(bytes: bytes, name: "wild.txt")
            #expect(chart.title == "Grüße aus Köln" && chart.artist == "Zoë" && chart.voices[0].lines[0].text == "Grüße")
            #expect(Self.warned(chart, line: 1, "the file is UTF-16 \(bigEndian ? "BE" : "LE")"))
        }
        // Legacy 8-bit, no #ENCODING: CP1252 (ü 0xFC, ß 0xDF).
        let legacy = Array("#TITLE:Gr".utf8) + [0xFC, 0xDF, 0x65] + Array("\n#ARTIST:A\n#BPM:300\n: 0 4 0 Gr".utf8) + [0xFC] + Array("\nE\n".utf8)
        let old = try SongChart.ultraStar(bytes: legacy, name: "wild.txt")
        #expect(old.title == "Grüße" && old.voices[0].lines[0].text == "Grü")
        #expect(Self.warned(old, line: 1, "not UTF-8 and has no #ENCODING header: read as CP1252"))
        // One ° (C2 B0 in UTF-8): valid UTF-8, so UTF-8 — not "Â°" as a code page would read it.
        let degree = try Self.load("#TITLE:40° Fieber\n#ARTIST:A\n#BPM:300\n: 0 4 0 a\nE\n")
        #expect(degree.title == "40° Fieber")
        #expect(!degree.warnings.contains { $0.contains("CP1252") })
    }

    @Test("#VIDEO holding a descriptor (v=…,co=…), MIDI-style pitch numbers, unknown note types")
    func fieldsMisused() throws {
        let video = try Self.load(Self.head + "#VIDEO:v=dQw4xyz,co=cover.jpg,bg=back.jpg\n: 0 4 0 a\nE\n")
        #expect(video.headers["VIDEO"] == "v=dQw4xyz,co=cover.jpg,bg=back.jpg")
        #expect(Self.warned(video, line: 4, "#VIDEO holds a descriptor"))
        // MIDI numbers 50…88 (D3…E6): read as semitones from C4 by taking 60 off; rap and freestyle notes keep theirs.
        let midi = try Self.load(Self.head + ": 0 4 50 a\n: 4 4 64 b\n* 8 4 88 c\nF 12 2 3 d\nE\n")
        #expect(midi.voices[0].notes.map(\.pitch) == [-10, 4, 28, -57])
        #expect(midi.voices[0].notes.map(\.midiNote) == [50, 64, 88, 3])
        #expect(Self.warned(midi, line: 4, "every pitch is 50 or more: read as MIDI note numbers"))
        let usual = try Self.load(Self.head + ": 0 4 0 a\n: 4 4 12 b\nE\n")
        #expect(usual.voices[0].notes.map(\.pitch) == [0, 12] && usual.warnings.isEmpty, "\(usual.warnings)")
        let kinds = try Self.load(Self.head + ": 0 4 0 a\nX 4 4 0 b\nE\n")
        #expect(kinds.voices[0].notes.map(\.kind) == [.normal, .freestyle])
        #expect(Self.warned(kinds, line: 5, "note type 'X' is not one of : * F R G: read as freestyle"))
    }

    @Test("A decimal beat is rounded, with a warning")
    func decimalBeats() throws {
        let chart = try Self.load(Self.head + ": 0 4 0 a\n: 4,5 2 0 b\nE\n")
        #expect(chart.voices[0].notes.map(\.startBeat) == [0, 5])
        #expect(Self.warned(chart, line: 5, "the note's start beat '4,5' is not a whole number: read as 5"))
    }

    // MARK: LRC

    @Test("LRC: several time tags, [mm:ss] without a fraction, seconds over 59, [OFFset:], bilingual lines, a step back")
    func lrc() throws {
        let chart = try Self.loadLRC("""
            [OFFset:+250]
            [00:10][00:40]Chorus
            [00:20.00]Verse
            [00:20.00]Strophe
            [00:75.50]Late
            [00:15.00]Back again
            [01:30.00]End

            """)
        let lines = chart.voices[0].lines
        #expect(lines.map(\.text) == ["Chorus", "Back again", "Verse / Strophe", "Chorus", "Late", "End"])
        #expect(lines.map(\.start) == [9.75, 14.75, 19.75, 39.75, 75.25, 89.75])
        #expect(chart.headers["OFFSET"] == "+250")
        #expect(Self.warned(chart, line: 5, "seconds over 59: read as 1:15.50", file: "wild.lrc"))
        #expect(Self.warned(chart, line: 4, "shares its time 0:20.00 with line 3: shown together", file: "wild.lrc"))
        #expect(Self.warned(chart, line: 6, "steps back from 1:15.50 (line 5): lines sorted by time", file: "wild.lrc"))
        let empty = try Self.loadLRC("[offset:]\n[00:01.00]a\n")
        #expect(empty.voices[0].lines[0].start == 1)
        #expect(Self.warned(empty, line: 1, "[offset:] is not a number of milliseconds: no offset", file: "wild.lrc"))
    }

    @Test("LRC: a byte order mark, CR-only line ends, UTF-16")
    func lrcText() throws {
        let bom = try SongChart.lrc(bytes: [0xEF, 0xBB, 0xBF] + Array("[ti:Über]\r[00:01.00]ä\r[00:02.00]ö\r".utf8), name: "wild.lrc")
        #expect(bom.title == "Über" && bom.voices[0].lines.map(\.text) == ["ä", "ö"])
        #expect(Self.warned(bom, line: 1, "CR-only line ends", file: "wild.lrc"))
        var utf16: [UInt8] = [0xFF, 0xFE]
        for unit in "[00:01.00]Grüße\n".utf16 { utf16 += [UInt8(unit & 0xFF), UInt8(unit >> 8)] }
        let wide = try SongChart.lrc(bytes: utf16, name: "wild.lrc")
        #expect(wide.voices[0].lines.map(\.text) == ["Grüße"])
        #expect(Self.warned(wide, line: 1, "UTF-16 LE", file: "wild.lrc"))
    }
}
