import AudioCore

extension SongChart {
    /// The largest beat, note length and pitch a chart may use: far beyond any song (a million beats at the fastest
    /// usual tempo is hours), small enough that no arithmetic on them overflows.
    static let beatLimit = 10_000_000
    static let pitchLimit = 127

    /// Parses an UltraStar TXT chart as UltraStar Deluxe reads it: format version 1.0/1.1 (`#VERSION`) and the
    /// older unversioned files, with what charts written by hand carry. Whatever a game can play loads, each oddity
    /// a warning naming the file and line (``warnings``).
    ///
    /// - Text: a byte order mark (UTF-8, UTF-16 LE or BE) decides; else an `#ENCODING` header (`UTF8`, `CP1252`,
    ///   `CP1250`); else UTF-8 when the bytes are valid UTF-8; else CP1252 (old files), with a warning. Lines end at
    ///   CR, LF or CR LF, mixed as they come; blank lines anywhere are skipped.
    /// - Headers: `#KEY:value`, keys and `#RELATIVE`'s value case-insensitive; every header is kept in ``headers``.
    ///   `#BPM` is required; `#TITLE` and `#ARTIST` are expected (a warning without them). Numbers take a decimal
    ///   point or comma (`#BPM:71,25`). A `#VIDEO` holding a descriptor (`v=…,co=…`) rather than a file is noted.
    /// - Body: notes `: * F R G` (`type start length pitch text`), line breaks `- beat` (`-25` too), voice changes
    ///   `P1`…`P9` (`P 1` too), `E` (the end: the rest is ignored; a missing `E` is no matter); `#RELATIVE:yes`
    ///   files' beats counted from each line's offset. Unknown note types are read as freestyle; `B` (BPM change)
    ///   lines are ignored, as UltraStar Deluxe does. A note of no length is freestyle; a decimal beat is rounded.
    ///   Notes out of order are sorted (each to the line its beat falls in); a note that overlaps the next is
    ///   shortened to end where the next starts; notes before beat 0 are kept; MIDI-style pitches (every pitch 36 or
    ///   more) are read as MIDI note numbers. A line that is none of these is skipped. All with a warning.
    /// - Parameters:
    ///   - bytes: the file's contents.
    ///   - name: what messages call the file (its path).
    ///   - folder: the folder its file references are relative to.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidChart` naming the file, the line and the field, only for what no
    ///   game could play: no `#BPM` or one that is not a positive number, no notes, a version this parser does not
    ///   read.
    public static func ultraStar(bytes: [UInt8], name: String = "chart", folder: String = ".") throws(AudioError) -> SongChart {
        var parser = UltraStarParser(name: name)
        return try parser.parse(bytes, folder: folder)
    }
}

/// One pass over an UltraStar file.
private struct UltraStarParser {
    let name: String
    var warnings: [String] = []

    init(name: String) { self.name = name }

    func failure(_ line: Int, _ message: String) -> AudioError {
        AudioError(.invalidChart, "\(name):\(line): \(message)")
    }

    mutating func warn(_ line: Int, _ message: String) {
        if warnings.count < 100 { warnings.append("\(name):\(line): \(message)") }
    }

    /// What is wrong with one line of the body: the line is skipped with a warning saying so.
    struct LineProblem: Error {
        var message: String
        init(_ message: String) { self.message = message }
    }

    /// A raw note as read, before times are known.
    struct RawNote {
        var kind: SongChart.NoteKind
        var start: Int
        var beats: Int
        var pitch: Int
        var text: String
        var line: Int
    }

    /// What a voice collects: its lines of raw notes.
    struct RawVoice {
        var number: Int
        var lines: [[RawNote]] = [[]]
        var relativeOffset = 0
        var lastNote: RawNote?
    }

    mutating func parse(_ all: [UInt8], folder: String) throws(AudioError) -> SongChart {
        let unwrapped = ChartText.unwrapped(all)
        if let note = unwrapped.note { warn(1, note) }
        let bytes = unwrapped.bytes[...]
        let lines = ChartText.lines(bytes)
        if let note = ChartText.lineEndingNote(bytes) { warn(1, note) }
        // The encoding: UTF-8 after a byte order mark; else an #ENCODING header (ASCII in every encoding), else
        // UTF-8 when the file is valid UTF-8.
        var encoding = ChartText.Encoding.utf8
        var named = unwrapped.hadByteOrderMark
        for (index, raw) in lines.enumerated() where !unwrapped.hadByteOrderMark {
            let ascii = String(decoding: raw.prefix(64), as: UTF8.self)
            let text = ascii[...].trimmedWhitespace
            guard text.hasPrefix("#") else {
                if !text.isEmpty { break }
                continue
            }
            let body = text.dropFirst()
            guard let colon = body.firstIndex(of: ":"), body[..<colon].trimmedWhitespace.uppercased() == "ENCODING" else { continue }
            let value = String(body[body.index(after: colon)...].trimmedWhitespace)
            if let e = ChartText.Encoding(name: value) {
                encoding = e
                named = true
            } else {
                warn(index + 1, "#ENCODING '\(value)' is not one LiveAudio reads (UTF-8, CP1252, CP1250): read as UTF-8, or CP1252 if it is not UTF-8")
            }
        }
        if !named, !ChartText.isValidUTF8(bytes) {
            encoding = .cp1252
            warn(1, "the file is not UTF-8 and has no #ENCODING header: read as CP1252")
        } else if named, encoding == .utf8, !ChartText.isValidUTF8(bytes) {
            warn(1, "the file is not valid UTF-8: its broken bytes read as U+FFFD")
        }

        var headers: [String: String] = [:]
        var headerLines: [String: Int] = [:]
        var inBody = false
        var bodyLine = lines.count + 1
        var relative = false
        var voices: [RawVoice] = []
        var current = 0  // index into voices
        var ended = false
        var blankInBody = false
        var lowerCaseKey = false

        for (index, raw) in lines.enumerated() where !ended {
            let number = index + 1
            // The common line, a plain note, read from its bytes without building Characters (a library of 80,000
            // charts is mostly note lines); anything unusual goes the long way below, which reads it the same.
            if inBody, var note = Self.plainNote(raw, encoding: encoding, line: number) {
                if relative { note.start += voices[current].relativeOffset }
                voices[current].lines[voices[current].lines.count - 1].append(note)
                voices[current].lastNote = note
                continue
            }
            let decoded = ChartText.decode(raw, as: encoding)
            let text = decoded[...].trimmedWhitespace
            if text.isEmpty {
                if inBody, !blankInBody {
                    blankInBody = true
                    warn(number, "a blank line among the notes: skipped")
                }
                continue
            }
            // A note's syllable keeps its trailing spaces ("Hello " + "World" is "Hello World"): notes are read from
            // the line with its leading white space alone removed.
            var untrimmed = decoded[...]
            while let c = untrimmed.first, c.isSpace { untrimmed.removeFirst() }
            if text.hasPrefix("#") {
                if inBody {
                    warn(number, "a header after the notes began: ignored")
                    continue
                }
                let body = text.dropFirst()
                guard let colon = body.firstIndex(of: ":") else {
                    warn(number, "a header without ':': ignored")
                    continue
                }
                let written = body[..<colon].trimmedWhitespace
                let key = written.uppercased()
                if key != written, !lowerCaseKey {
                    lowerCaseKey = true
                    warn(number, "#\(written) is not in capitals: read as #\(key)")
                }
                let value = String(body[body.index(after: colon)...].trimmedWhitespace)
                guard !key.isEmpty else {
                    warn(number, "a header without a name: ignored")
                    continue
                }
                if headers[key] != nil { warn(number, "#\(key) given again: the last one counts") }
                headers[key] = value
                headerLines[key] = number
                if key == "RELATIVE" {
                    relative = value.lowercased() == "yes"
                    if relative, value != "YES" { warn(number, "#RELATIVE:\(value) read as YES") }
                }
                continue
            }
            if !inBody {
                inBody = true
                bodyLine = number
                voices.append(RawVoice(number: 1))
            }
            let kind = text.first!
            switch kind {
            case "E":
                ended = true
                if text.count > 1 { warn(number, "text after 'E' on its line: ignored") }
            case "P" where text.dropFirst().trimmedWhitespace.first?.isNumber ?? false:
                let digits = text.dropFirst().trimmedWhitespace
                guard let n = Int(digits), (1...9).contains(n) else {
                    warn(number, "a voice change must be P1 … P9, got '\(text.prefix(20))': ignored")
                    continue
                }
                if text.dropFirst().first?.isSpace == true { warn(number, "'\(text)' read as P\(n)") }
                if let i = voices.firstIndex(where: { $0.number == n }) {
                    current = i
                } else if voices.count == 1, voices[0].number == 1, voices[0].lastNote == nil {
                    // The body began with this voice change: the implicit P1 had nothing.
                    voices[0].number = n
                    current = 0
                } else {
                    voices.append(RawVoice(number: n))
                    current = voices.count - 1
                }
            case "-":
                let fields = text.dropFirst().split(whereSeparator: \.isSpace)
                if let c = text.dropFirst().first, !c.isSpace { warn(number, "'\(text.prefix(20))' has no space after '-': read as a line break at beat \(fields[0])") }
                guard let first = fields.first else {
                    warn(number, "a line break ('-') without its beat: taken as a line break")
                    if voices[current].lines.last?.isEmpty == false { voices[current].lines.append([]) }
                    continue
                }
                let beat: Int
                do throws(LineProblem) {
                    beat = try integer(first, "the line break's beat", number, range: -SongChart.beatLimit...SongChart.beatLimit)
                } catch {
                    warn(number, error.message + ": taken as a line break")
                    if voices[current].lines.last?.isEmpty == false { voices[current].lines.append([]) }
                    continue
                }
                if let last = voices[current].lastNote, beat + voices[current].relativeOffset < last.start + last.beats {
                    warn(number, "the line break at beat \(beat + voices[current].relativeOffset) comes before the note before it (line \(last.line)) ends at beat \(last.start + last.beats)")
                }
                // Relative mode: each line's beats count from the offsets summed so far, from 0 as UltraStar
                // Deluxe counts (the unversioned spec's "initialised to #GAP" would add milliseconds to beats).
                if relative {
                    if fields.count >= 2,
                        let offset = try? integer(fields[1], "the line break's offset", number, range: -SongChart.beatLimit...SongChart.beatLimit),
                        abs(voices[current].relativeOffset + offset) <= SongChart.beatLimit
                    {
                        voices[current].relativeOffset += offset
                    } else {
                        warn(number, "#RELATIVE:yes line breaks give two beats ('- beat offset'): the next line counted from beat \(beat) instead")
                        voices[current].relativeOffset += beat
                    }
                }
                if voices[current].lines.last?.isEmpty == false { voices[current].lines.append([]) }
            case "B":
                warn(number, "a BPM change ('B' line) is ignored, as UltraStar Deluxe does")
            default:
                // A note's type is one visible ASCII character; an unknown one must stand alone (text is no note).
                let known = SongChart.NoteKind(rawValue: String(kind)) != nil
                let separated = text.dropFirst().first.map(\.isSpace) ?? false
                guard let scalar = kind.unicodeScalars.first, kind.unicodeScalars.count == 1, scalar.value >= 0x21,
                    scalar.value <= 0x7E, known || separated
                else {
                    warn(number, "'\(text.prefix(20))' is neither a header, a note, a line break nor a voice change: ignored")
                    continue
                }
                do throws(LineProblem) {
                    var note = try self.note(untrimmed, number)
                    if relative { note.start += voices[current].relativeOffset }
                    voices[current].lines[voices[current].lines.count - 1].append(note)
                    voices[current].lastNote = note
                } catch {
                    warn(number, error.message + ": the note is skipped")
                }
            }
        }

        if inBody, !ended { warn(lines.count, "no 'E' ends the notes: the file's end does") }
        let version = headers["VERSION"].flatMap { $0.isEmpty ? nil : $0 }
        if let version {
            let major = version.split(separator: ".").first.flatMap { Int($0) }
            guard let major, major <= 1 else {
                throw failure(headerLines["VERSION"] ?? 1, "#VERSION \(version): LiveAudio reads UltraStar format versions up to 1.x")
            }
            if major < 1 { warn(headerLines["VERSION"] ?? 1, "#VERSION \(version): read as the unversioned format") }
        }
        guard let bpmText = headers["BPM"], !bpmText.isEmpty else {
            throw failure(min(bodyLine, lines.count), "#BPM: no such header before the notes (the tempo every note's time is counted in)")
        }
        let bpmLine = headerLines["BPM"] ?? 1
        for key in ["BPM", "GAP", "START", "END"] where headers[key]?.contains(",") == true {
            warn(headerLines[key] ?? 1, "#\(key) '\(headers[key]!)' has a decimal comma: read as \(headers[key]!.replacing(",", with: "."))")
        }
        guard let bpm = String.chartNumber(bpmText[...]), bpm > 0 else {
            throw failure(bpmLine, "#BPM '\(bpmText)' is not a positive number")
        }
        guard bpm <= 100_000 else { throw failure(bpmLine, "#BPM \(bpmText) is above 100000") }
        func number(_ key: String, allowNegative: Bool = false) -> Double? {
            guard let text = headers[key], !text.isEmpty else { return nil }
            let line = headerLines[key] ?? 1
            guard let value = String.chartNumber(text[...]), allowNegative || value >= 0 else {
                warn(line, "#\(key) '\(text)' is not a \(allowNegative ? "" : "non-negative ")number: ignored")
                return nil
            }
            guard abs(value) <= 1e9 else {
                warn(line, "#\(key) \(text) is beyond 1000000000: ignored")
                return nil
            }
            return value
        }
        let gap = number("GAP") ?? 0
        let start = number("START")
        let end = number("END")
        let title = headers["TITLE"] ?? ""
        let artist = headers["ARTIST"] ?? ""
        if title.isEmpty { warn(1, "no #TITLE") }
        if artist.isEmpty { warn(1, "no #ARTIST") }
        if let video = headers["VIDEO"], video.contains("="), video.contains(",") || video.hasPrefix("v=") || video.hasPrefix("co=") {
            warn(headerLines["VIDEO"] ?? 1, "#VIDEO holds a descriptor ('\(video.prefix(40))'), not a file name: no video")
        }

        // What hand-written bodies carry: notes out of order, overlapping, before beat 0, MIDI-style pitches.
        for i in voices.indices { tidy(&voices[i]) }
        let pitched = voices.flatMap { $0.lines.joined().filter { $0.kind.hasPitch } }
        if let lowest = pitched.map(\.pitch).min(), lowest >= 36 {
            warn(pitched.first(where: { $0.pitch == lowest })?.line ?? 1,
                 "every pitch is \(lowest) or more: read as MIDI note numbers (60 is C4, UltraStar's 0)")
            for v in voices.indices {
                for l in voices[v].lines.indices {
                    for n in voices[v].lines[l].indices { voices[v].lines[l][n].pitch -= 60 }
                }
            }
        }

        var chart = SongChart(
            format: .ultraStar(version: version), title: title, artist: artist, headers: headers,
            beatsPerMinute: bpm, gapMilliseconds: gap, startSeconds: start, endMilliseconds: end, folder: folder,
            voices: [], warnings: [])
        for raw in voices.sorted(by: { $0.number < $1.number }) {
            // #P1…#P9, or the older #DUETSINGERP1…
            let name = (headers["P\(raw.number)"] ?? headers["DUETSINGERP\(raw.number)"]).flatMap { $0.isEmpty ? nil : $0 }
            if voices.count > 1, name == nil { warn(1, "voice P\(raw.number) has no #P\(raw.number) header naming it") }
            var lines: [SongChart.Line] = []
            for notes in raw.lines where !notes.isEmpty {
                let syllables = notes.map { n in
                    SongChart.Syllable(
                        text: n.text, start: chart.time(ofBeat: Double(n.start)),
                        end: chart.time(ofBeat: Double(n.start + n.beats)),
                        note: SongChart.Note(kind: n.kind, startBeat: n.start, beats: n.beats, pitch: n.pitch, sourceLine: n.line))
                }
                lines.append(SongChart.Line(syllables: syllables, start: syllables.first!.start, end: syllables.last!.end))
            }
            if !lines.isEmpty { chart.voices.append(SongChart.Voice(number: raw.number, name: name, lines: lines)) }
        }
        guard chart.hasNotes else {
            throw failure(max(1, lines.count), "notes: none in the file (': beat length pitch syllable' lines) — nothing to sing")
        }
        chart.warnings = warnings
        return chart
    }

    /// Puts a voice's notes in order and takes out their overlaps, as the games play such charts: every note sorted
    /// by its beat into the line its beat falls in (lines ordered by their first beat), then each note that runs
    /// into the next shortened to end where the next starts.
    mutating func tidy(_ voice: inout RawVoice) {
        let lines = voice.lines.filter { !$0.isEmpty }
        var notes = lines.flatMap { $0 }
        guard !notes.isEmpty else {
            voice.lines = []
            return
        }
        let inOrder = zip(notes, notes.dropFirst()).allSatisfy { $0.start <= $1.start }
        var ordered = lines
        if !inOrder {
            if let (a, b) = zip(notes, notes.dropFirst()).first(where: { $0.start > $1.start }) {
                warn(b.line, "the note at beat \(b.start) comes after the one at beat \(a.start) (line \(a.line)): notes sorted by beat")
            }
            // Each line begins at its earliest beat; a note belongs to the last line that begins at or before it.
            let starts = lines.map { $0.map(\.start).min()! }.enumerated().sorted { ($0.element, $0.offset) < ($1.element, $1.offset) }
            notes.sort { ($0.start, $0.line) < ($1.start, $1.line) }
            ordered = Array(repeating: [], count: starts.count)
            var k = 0
            for note in notes {
                while k + 1 < starts.count, starts[k + 1].element <= note.start { k += 1 }
                ordered[k].append(note)
            }
            ordered.removeAll { $0.isEmpty }
        }
        // Overlaps, over the voice's notes in order.
        var previous: (line: Int, index: Int)?
        for l in ordered.indices {
            for i in ordered[l].indices {
                defer { previous = (l, i) }
                guard let (pl, pi) = previous else { continue }
                let next = ordered[l][i]
                let before = ordered[pl][pi]
                guard before.start + before.beats > next.start else { continue }
                let overlap = before.start + before.beats - next.start
                warn(next.line, "the note at beat \(next.start) starts \(overlap) beat\(overlap == 1 ? "" : "s") before the one at beat \(before.start) (line \(before.line)) ends: that one shortened to \(next.start - before.start)")
                ordered[pl][pi].beats = next.start - before.start
                if ordered[pl][pi].beats == 0 { ordered[pl][pi].kind = .freestyle }
            }
        }
        if let first = notes.min(by: { $0.start < $1.start }), first.start < 0 {
            warn(first.line, "P\(voice.number) begins at beat \(first.start), before beat 0: sung before #GAP")
        }
        voice.lines = ordered
    }

    /// A note line in its most common form — leading ASCII blanks, a known type, three plain decimal integers in
    /// range (the length above 0) each followed by an ASCII blank, the syllable — read from the bytes; nil for any
    /// other line.
    static func plainNote(_ raw: ArraySlice<UInt8>, encoding: ChartText.Encoding, line: Int) -> RawNote? {
        var i = raw.startIndex
        let end = raw.endIndex
        @inline(__always) func blank(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 }
        while i < end, blank(raw[i]) { i += 1 }
        guard i < end else { return nil }
        let kind: SongChart.NoteKind
        switch raw[i] {
        case UInt8(ascii: ":"): kind = .normal
        case UInt8(ascii: "*"): kind = .golden
        case UInt8(ascii: "F"): kind = .freestyle
        case UInt8(ascii: "R"): kind = .rap
        case UInt8(ascii: "G"): kind = .goldenRap
        default: return nil
        }
        i += 1
        guard i < end, blank(raw[i]) else { return nil }
        var fields: (Int, Int, Int) = (0, 0, 0)
        for f in 0..<3 {
            while i < end, blank(raw[i]) { i += 1 }
            var negative = false
            if i < end, raw[i] == UInt8(ascii: "-") {
                negative = true
                i += 1
            }
            var value = 0
            var digits = 0
            while i < end, raw[i] >= 0x30, raw[i] <= 0x39, digits < 9 {
                value = value * 10 + Int(raw[i] - 0x30)
                digits += 1
                i += 1
            }
            // A field ends at a blank (the last may end the line when the syllable is empty).
            guard digits > 0, i == end ? f == 2 : blank(raw[i]) else { return nil }
            if negative { value = -value }
            switch f {
            case 0: fields.0 = value
            case 1: fields.1 = value
            default: fields.2 = value
            }
        }
        guard abs(fields.0) <= SongChart.beatLimit, fields.1 > 0, fields.1 <= SongChart.beatLimit,
            abs(fields.2) <= SongChart.pitchLimit
        else { return nil }
        // One separator, then the syllable as written.
        if i < end { i += 1 }
        let text = encoding == .utf8 ? String(decoding: raw[i...], as: UTF8.self) : ChartText.decode(raw[i...], as: encoding)
        return RawNote(kind: kind, start: fields.0, beats: fields.1, pitch: fields.2, text: text, line: line)
    }

    /// A note line: `type start length pitch text` (the text after one separating space, its own spaces kept).
    mutating func note(_ line: Substring, _ number: Int) throws(LineProblem) -> RawNote {
        let typeCharacter = line.first!
        var kind = SongChart.NoteKind(rawValue: String(typeCharacter))
        if kind == nil {
            warn(number, "note type '\(typeCharacter)' is not one of : * F R G: read as freestyle")
            kind = .freestyle
        }
        var rest = line.dropFirst()
        func field(_ what: String) throws(LineProblem) -> Substring {
            while let c = rest.first, c.isSpace { rest.removeFirst() }
            let end = rest.firstIndex(where: \.isSpace) ?? rest.endIndex
            let token = rest[..<end]
            guard !token.isEmpty else { throw LineProblem("the note has no \(what)") }
            rest = rest[end...]
            return token
        }
        let start = try integer(try field("start beat"), "the note's start beat", number, range: -SongChart.beatLimit...SongChart.beatLimit)
        var beats = try integer(try field("length"), "the note's length", number, range: -SongChart.beatLimit...SongChart.beatLimit)
        let pitch = try integer(try field("pitch"), "the note's pitch", number, range: -SongChart.pitchLimit...SongChart.pitchLimit)
        // One separator, then the syllable as written (a leading space marks a new word).
        if let c = rest.first, c.isSpace { rest.removeFirst() }
        if beats < 0 {
            warn(number, "the note's length \(beats) is negative: read as 0")
            beats = 0
        }
        if beats == 0 {
            if kind != .freestyle { warn(number, "a note of no length: read as freestyle") }
            kind = .freestyle
        }
        return RawNote(kind: kind!, start: start, beats: beats, pitch: pitch, text: String(rest), line: number)
    }

    /// A whole number; a decimal one (`12,5`, `12.5`) is rounded, with a warning.
    mutating func integer(_ token: Substring, _ what: String, _ number: Int, range: ClosedRange<Int>) throws(LineProblem) -> Int {
        var value: Int
        if token.count <= 12, let v = Int(token) {
            value = v
        } else if token.count <= 24, let d = String.chartNumber(token), abs(d) < 1e12 {
            value = Int(d.rounded())
            warn(number, "\(what) '\(token)' is not a whole number: read as \(value)")
        } else {
            throw LineProblem("\(what) '\(token.prefix(20))' is not a number")
        }
        guard range.contains(value) else {
            throw LineProblem("\(what) \(value) is out of range (\(range.lowerBound) … \(range.upperBound))")
        }
        return value
    }
}
