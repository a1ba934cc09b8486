import AudioCore

extension SongChart {
    /// The largest beat, note length and pitch a chart may use: far beyond any song (a million beats at the fastest
    /// usual tempo is hours), small enough that no arithmetic on them overflows.
    static let beatLimit = 10_000_000
    static let pitchLimit = 127

    /// Parses an UltraStar TXT chart: format version 1.0/1.1 (`#VERSION`) and the older unversioned files.
    ///
    /// - Text: UTF-8, with or without a byte order mark; an `#ENCODING` header (`CP1252`, `CP1250`, `UTF8`) decodes
    ///   the whole file so; without one, a file that is not valid UTF-8 is read as CP1252 (old files), with a warning.
    /// - Headers: `#KEY:value`, keys case-insensitive; every header is kept in ``headers``. `#BPM` is required;
    ///   `#TITLE` and `#ARTIST` are expected (a warning without them). Numbers take a decimal point or comma.
    /// - Body: notes `: * F R G` (`type start length pitch text`), line breaks `- beat`, voice changes `P1`…`P9`,
    ///   `E` (the end: the rest is ignored); `#RELATIVE:yes` files' beats counted from each line's offset. Unknown
    ///   note types are read as freestyle; `B` (BPM change) lines are ignored, as UltraStar Deluxe does; both with
    ///   a warning. A note of no length is freestyle.
    /// - Parameters:
    ///   - bytes: the file's contents.
    ///   - name: what messages call the file (its path).
    ///   - folder: the folder its file references are relative to.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidChart` naming the file, the line and the field: no `#BPM`, a field
    ///   that is not a number, a note that starts before the one before it ends, a version this parser does not read.
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
        let bytes = ChartText.withoutByteOrderMark(all)
        let lines = ChartText.lines(bytes)
        // The encoding: an #ENCODING header (ASCII in every encoding), else UTF-8 when the file is valid UTF-8.
        var encoding = ChartText.Encoding.utf8
        var named = false
        for (index, raw) in lines.enumerated() {
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
        }

        var headers: [String: String] = [:]
        var inBody = false
        var relative = false
        var voices: [RawVoice] = []
        var current = 0  // index into voices
        var ended = false

        for (index, raw) in lines.enumerated() where !ended {
            let number = index + 1
            let decoded = ChartText.decode(raw, as: encoding)
            let text = decoded[...].trimmedWhitespace
            if text.isEmpty { continue }
            // A note's syllable keeps its trailing spaces ("Hello " + "World" is "Hello World"): notes are read from
            // the line with its leading white space alone removed.
            var untrimmed = decoded[...]
            while let c = untrimmed.first, c.isWhitespace { untrimmed.removeFirst() }
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
                let key = body[..<colon].trimmedWhitespace.uppercased()
                let value = String(body[body.index(after: colon)...].trimmedWhitespace)
                guard !key.isEmpty else {
                    warn(number, "a header without a name: ignored")
                    continue
                }
                if headers[key] != nil { warn(number, "#\(key) given again: the last one counts") }
                headers[key] = value
                if key == "RELATIVE" { relative = value.lowercased() == "yes" }
                continue
            }
            if !inBody {
                inBody = true
                voices.append(RawVoice(number: 1))
            }
            let kind = text.first!
            switch kind {
            case "E":
                ended = true
            case "P":
                let digits = text.dropFirst().trimmedWhitespace
                guard let n = Int(digits), (1...9).contains(n) else {
                    throw failure(number, "a voice change must be P1 … P9, got '\(text.prefix(20))'")
                }
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
                let fields = text.dropFirst().split(whereSeparator: \.isWhitespace)
                guard let first = fields.first else { throw failure(number, "a line break ('-') without its beat") }
                let beat = try integer(first, "the line break's beat", number, range: -SongChart.beatLimit...SongChart.beatLimit)
                // Relative mode: each line's beats count from the offsets summed so far, from 0 as UltraStar
                // Deluxe counts (the unversioned spec's "initialised to #GAP" would add milliseconds to beats).
                if relative {
                    guard fields.count >= 2 else {
                        throw failure(number, "#RELATIVE:yes line breaks give two beats ('- beat offset'), got one")
                    }
                    let offset = try integer(fields[1], "the line break's offset", number, range: -SongChart.beatLimit...SongChart.beatLimit)
                    voices[current].relativeOffset += offset
                    guard abs(voices[current].relativeOffset) <= SongChart.beatLimit else {
                        throw failure(number, "the relative offset grows past \(SongChart.beatLimit) beats")
                    }
                }
                _ = beat
                if voices[current].lines.last?.isEmpty == false { voices[current].lines.append([]) }
            case "B":
                warn(number, "a BPM change ('B' line) is ignored, as UltraStar Deluxe does")
            default:
                // A note's type is one visible ASCII character; an unknown one must stand alone (text is no note).
                let known = SongChart.NoteKind(rawValue: String(kind)) != nil
                let separated = text.dropFirst().first.map(\.isWhitespace) ?? false
                guard let scalar = kind.unicodeScalars.first, kind.unicodeScalars.count == 1, scalar.value >= 0x21,
                    scalar.value <= 0x7E, known || separated
                else {
                    throw failure(number, "'\(text.prefix(20))' is neither a header, a note, a line break nor a voice change")
                }
                var note = try self.note(untrimmed, number)
                if relative { note.start += voices[current].relativeOffset }
                if let last = voices[current].lastNote, note.start < last.start + last.beats {
                    throw failure(
                        number,
                        "the note at beat \(note.start) starts before the one before it (line \(last.line), beats \(last.start) … \(last.start + last.beats)) ends"
                    )
                }
                voices[current].lines[voices[current].lines.count - 1].append(note)
                voices[current].lastNote = note
            }
        }

        let version = headers["VERSION"].flatMap { $0.isEmpty ? nil : $0 }
        if let version {
            let major = version.split(separator: ".").first.flatMap { Int($0) }
            guard let major, major <= 1 else {
                throw AudioError(.invalidChart, "\(name): #VERSION \(version): LiveAudio reads UltraStar format versions up to 1.x")
            }
            if major < 1 { warn(1, "#VERSION \(version): read as the unversioned format") }
        }
        guard let bpmText = headers["BPM"], !bpmText.isEmpty else {
            throw AudioError(.invalidChart, "\(name): no #BPM header (the tempo every note's time is counted in)")
        }
        let bpmLine = lineNumber(of: "BPM", in: lines)
        guard let bpm = String.chartNumber(bpmText[...]), bpm > 0 else {
            throw failure(bpmLine, "#BPM '\(bpmText)' is not a positive number")
        }
        guard bpm <= 100_000 else { throw failure(bpmLine, "#BPM \(bpmText) is above 100000") }
        func number(_ key: String, allowNegative: Bool = false) throws(AudioError) -> Double? {
            guard let text = headers[key], !text.isEmpty else { return nil }
            let line = lineNumber(of: key, in: lines)
            guard let value = String.chartNumber(text[...]), allowNegative || value >= 0 else {
                throw failure(line, "#\(key) '\(text)' is not a \(allowNegative ? "" : "non-negative ")number")
            }
            guard abs(value) <= 1e9 else { throw failure(line, "#\(key) \(text) is beyond 1000000000") }
            return value
        }
        let gap = try number("GAP") ?? 0
        let start = try number("START")
        let end = try number("END")
        let title = headers["TITLE"] ?? ""
        let artist = headers["ARTIST"] ?? ""
        if title.isEmpty { warn(1, "no #TITLE") }
        if artist.isEmpty { warn(1, "no #ARTIST") }

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
            chart.voices.append(SongChart.Voice(number: raw.number, name: name, lines: lines))
        }
        if !chart.hasNotes { warn(1, "the chart has no notes") }
        chart.warnings = warnings
        return chart
    }

    /// A note line: `type start length pitch text` (the text after one separating space, its own spaces kept).
    mutating func note(_ line: Substring, _ number: Int) throws(AudioError) -> RawNote {
        let typeCharacter = line.first!
        var kind = SongChart.NoteKind(rawValue: String(typeCharacter))
        if kind == nil {
            warn(number, "note type '\(typeCharacter)' is not one of : * F R G: read as freestyle")
            kind = .freestyle
        }
        var rest = line.dropFirst()
        func field(_ what: String) throws(AudioError) -> Substring {
            while let c = rest.first, c.isWhitespace { rest.removeFirst() }
            let end = rest.firstIndex(where: \.isWhitespace) ?? rest.endIndex
            let token = rest[..<end]
            guard !token.isEmpty else { throw failure(number, "the note has no \(what)") }
            rest = rest[end...]
            return token
        }
        let start = try integer(try field("start beat"), "the note's start beat", number, range: -SongChart.beatLimit...SongChart.beatLimit)
        var beats = try integer(try field("length"), "the note's length", number, range: 0...SongChart.beatLimit)
        let pitch = try integer(try field("pitch"), "the note's pitch", number, range: -SongChart.pitchLimit...SongChart.pitchLimit)
        // One separator, then the syllable as written (a leading space marks a new word).
        if let c = rest.first, c.isWhitespace { rest.removeFirst() }
        if beats == 0 {
            kind = .freestyle
            beats = 0
        }
        return RawNote(kind: kind!, start: start, beats: beats, pitch: pitch, text: String(rest), line: number)
    }

    func integer(_ token: Substring, _ what: String, _ number: Int, range: ClosedRange<Int>) throws(AudioError) -> Int {
        guard token.count <= 12, let value = Int(token) else {
            throw failure(number, "\(what) '\(token.prefix(20))' is not a whole number")
        }
        guard range.contains(value) else {
            throw failure(number, "\(what) \(value) is out of range (\(range.lowerBound) … \(range.upperBound))")
        }
        return value
    }

    /// The line a header was given on (for messages about its value).
    func lineNumber(of key: String, in lines: [ArraySlice<UInt8>]) -> Int {
        var found = 1
        for (index, raw) in lines.enumerated() {
            let text = String(decoding: raw, as: UTF8.self)[...].trimmedWhitespace
            guard text.hasPrefix("#") else {
                if !text.isEmpty { break }
                continue
            }
            guard let colon = text.firstIndex(of: ":") else { continue }
            if text[text.index(after: text.startIndex)..<colon].trimmedWhitespace.uppercased() == key { found = index + 1 }
        }
        return found
    }
}
