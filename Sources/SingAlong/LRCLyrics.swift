import AudioCore

extension SongChart {
    /// Parses LRC lyrics: lines `[mm:ss.xx]text` (minutes of any length, seconds with up to three decimals, or
    /// none), several time tags on one line (the line sung at each), id tags (`[ti:]`, `[ar:]`, `[al:]`, … kept in
    /// ``headers``, keys in any case), `[offset:±ms]` (positive: the lyrics come sooner), and enhanced LRC's word
    /// times `<mm:ss.xx>` inside a line. A line with no text is a pause: it ends the line before it. A line ends where
    /// the next one starts (the last, 4 s after its last word starts). Lines are sorted by time.
    ///
    /// What files in the wild carry loads, with a warning naming the line: seconds over 59 (`[01:75.00]` is 2:15),
    /// an `[offset:]` that is empty or not a number (no offset), lines sharing a time (a translation under the sung
    /// line: shown together, joined by " / "), a time that steps back from the line before (sorted), a time tag
    /// that is not a time or has no `]` (the line skipped), text without a time tag (skipped).
    ///
    /// The text is UTF-8 (with or without a byte order mark), UTF-16 with a byte order mark, or CP1252 when it is not
    /// valid UTF-8 (a warning). Lines end at CR, LF or CR LF.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidChart` naming the file and line when no line has a time.
    public static func lrc(bytes: [UInt8], name: String = "lyrics", folder: String = ".") throws(AudioError) -> SongChart {
        var warnings: [String] = []
        func warn(_ line: Int, _ message: String) {
            if warnings.count < 100 { warnings.append("\(name):\(line): \(message)") }
        }
        let unwrapped = ChartText.unwrapped(bytes)
        if let note = unwrapped.note { warn(1, note) }
        let body = unwrapped.bytes[...]
        if let note = ChartText.lineEndingNote(body) { warn(1, note) }
        let encoding: ChartText.Encoding = unwrapped.hadByteOrderMark || ChartText.isValidUTF8(body) ? .utf8 : .cp1252
        if encoding == .cp1252 { warn(1, "the file is not UTF-8: read as CP1252") }

        var headers: [String: String] = [:]
        var offsetMilliseconds = 0.0
        /// A timed line as read: when, its text pieces (before the first word time, then one per word time).
        struct Timed {
            var time: Double
            /// The first time tag of the line it was written on: its word times belong to that one, and move with
            /// the text to the line's other time tags.
            var firstTag: Double
            var pieces: [(time: Double?, text: String)]
            var order: Int
            /// The file line it was written on.
            var source: Int
        }
        var timed: [Timed] = []
        var previousSingle: (time: Double, line: Int)?
        var steppedBack = false
        let allLines = ChartText.lines(body)
        lines: for (index, raw) in allLines.enumerated() {
            let number = index + 1
            var text = ChartText.decode(raw, as: encoding)[...].trimmedWhitespace
            if text.isEmpty { continue }
            guard text.hasPrefix("[") else {
                warn(number, "a line without a time tag: ignored")
                continue
            }
            var times: [Double] = []
            while text.hasPrefix("[") {
                guard let close = text.firstIndex(of: "]") else {
                    warn(number, "'[' without its ']': the line is skipped")
                    continue lines
                }
                let tag = text[text.index(after: text.startIndex)..<close]
                text = text[text.index(after: close)...]
                guard let colon = tag.firstIndex(of: ":") else {
                    warn(number, "tag '[\(tag.prefix(20))]' is neither a time nor an id tag: the line is skipped")
                    continue lines
                }
                let key = tag[..<colon].trimmedWhitespace
                if let first = key.first, first.isASCII, first.isNumber {
                    guard let time = timestamp(tag) else {
                        warn(number, "time tag '[\(tag.prefix(20))]' is not mm:ss.xx: the line is skipped")
                        continue lines
                    }
                    if secondsOver59(tag) {
                        warn(number, "time tag '[\(tag.prefix(20))]' has seconds over 59: read as \(Self.minutesAndSeconds(time))")
                    }
                    times.append(time)
                } else {
                    let value = String(tag[tag.index(after: colon)...].trimmedWhitespace)
                    let name = key.uppercased()
                    headers[name] = value
                    if name == "OFFSET" {
                        if let ms = String.chartNumber(value[...]), abs(ms) <= 1e9 {
                            offsetMilliseconds = ms
                        } else {
                            warn(number, "[\(key):\(value.prefix(20))] is not a number of milliseconds: no offset")
                            offsetMilliseconds = 0
                        }
                    }
                }
            }
            if times.isEmpty { continue }
            if times.count == 1 {
                if let previous = previousSingle, times[0] < previous.time, !steppedBack {
                    steppedBack = true
                    warn(number, "the time \(Self.minutesAndSeconds(times[0])) steps back from \(Self.minutesAndSeconds(previous.time)) (line \(previous.line)): lines sorted by time")
                }
                previousSingle = (times[0], number)
            }
            // The text, cut at enhanced LRC's word times.
            var pieces: [(time: Double?, text: String)] = []
            var rest = text
            var pieceTime: Double? = nil
            while let open = rest.firstIndex(of: "<") {
                guard let close = rest[open...].firstIndex(of: ">") else { break }
                let inner = rest[rest.index(after: open)..<close]
                guard let time = timestamp(inner) else { break }
                let before = String(rest[..<open])
                if !before.isEmpty || pieceTime != nil { pieces.append((pieceTime, before)) }
                pieceTime = time
                rest = rest[rest.index(after: close)...]
            }
            pieces.append((pieceTime, String(rest)))
            for t in times { timed.append(Timed(time: t, firstTag: times[0], pieces: pieces, order: timed.count, source: number)) }
        }
        guard !timed.isEmpty else {
            throw AudioError(.invalidChart, "\(name):\(max(1, allLines.count)): no timed line ([mm:ss.xx]text)")
        }
        timed.sort { ($0.time, $0.order) < ($1.time, $1.order) }
        // Lines written apart that share a time (a translation, a second language): one line, joined by " / ".
        var merged: [Timed] = []
        for line in timed {
            let hasText = !line.pieces.map(\.text).joined().trimmingSpaces.isEmpty
            if var last = merged.last, last.time == line.time, last.source != line.source, hasText,
                !last.pieces.map(\.text).joined().trimmingSpaces.isEmpty
            {
                warn(line.source, "the line shares its time \(Self.minutesAndSeconds(line.time)) with line \(last.source): shown together")
                last.pieces.append((nil, " / "))
                // The translation's word times, if any, are dropped: its words are shown, not followed.
                last.pieces.append(contentsOf: line.pieces.map { (time: nil, text: $0.text) })
                merged[merged.count - 1] = last
            } else {
                merged.append(line)
            }
        }
        timed = merged
        let shift = -offsetMilliseconds / 1000

        var lines: [SongChart.Line] = []
        for (i, line) in timed.enumerated() {
            let text = line.pieces.map(\.text).joined()
            if text.trimmingSpaces.isEmpty { continue }
            let start = line.time + shift
            let next = i + 1 < timed.count ? timed[i + 1].time + shift : nil
            // Word times were written for the line's first time tag; at its other tags they move with the text.
            let wordShift = line.time - line.firstTag
            // Word times that go backwards are held at the word before (a syllable never starts before its
            // predecessor), and none starts before its line.
            var syllables: [SongChart.Syllable] = []
            for piece in line.pieces where !piece.text.isEmpty {
                let at = (piece.time.map { $0 + wordShift } ?? line.time) + shift
                syllables.append(SongChart.Syllable(text: piece.text, start: max(at, syllables.last?.start ?? start), end: 0, note: nil))
            }
            let lastStart = syllables.last?.start ?? start
            let end = max(next ?? (lastStart + 4), lastStart)
            for k in syllables.indices { syllables[k].end = k + 1 < syllables.count ? syllables[k + 1].start : end }
            lines.append(SongChart.Line(syllables: syllables, start: start, end: end))
        }
        return SongChart(
            format: .lrc, title: headers["TI"] ?? "", artist: headers["AR"] ?? "", headers: headers, beatsPerMinute: nil,
            gapMilliseconds: 0, startSeconds: nil, endMilliseconds: nil, folder: folder,
            voices: [SongChart.Voice(number: 1, name: nil, lines: lines)], warnings: warnings)
    }

    /// `mm:ss`, `mm:ss.x…` or `mm:ss:xx` in seconds (seconds of 60 or more add up); nil otherwise.
    static func timestamp(_ text: Substring) -> Double? {
        let t = text.trimmedWhitespace
        let parts = t.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2 || parts.count == 3,
            parts.allSatisfy({ !$0.isEmpty && $0.count <= 9 && $0.allSatisfy { $0.isASCII && ($0.isNumber || $0 == ".") } }),
            let minutes = Int(parts[0])
        else { return nil }
        var seconds: Double
        if parts.count == 3 {
            guard let s = Int(parts[1]), let hundredths = Int(parts[2]) else { return nil }
            seconds = Double(s) + Double(hundredths) / 100
        } else {
            guard let s = Double(parts[1]) else { return nil }
            seconds = s
        }
        guard seconds < 1_000_000, minutes < 1_000_000 else { return nil }
        return Double(minutes) * 60 + seconds
    }

    /// True when a time tag's seconds field is 60 or more (read on, as minutes and seconds added up).
    static func secondsOver59(_ text: Substring) -> Bool {
        let parts = text.trimmedWhitespace.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count >= 2, let s = Double(parts[1]) else { return false }
        return s >= 60
    }

    /// `m:ss.xx` for messages.
    static func minutesAndSeconds(_ time: Double) -> String {
        let minutes = Int(time / 60)
        let seconds = time - Double(minutes) * 60
        let hundredths = Int((seconds * 100).rounded())
        return "\(minutes):\(hundredths < 1000 ? "0" : "")\(hundredths / 100).\(hundredths % 100 < 10 ? "0" : "")\(hundredths % 100)"
    }
}
