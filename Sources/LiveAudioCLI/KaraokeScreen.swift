import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LiveAudio
import Synchronization

/// The terminal of an interactive run: keys read one at a time without echo, the screen redrawn in place, and both
/// put back as they were when the run ends (also after an error).
final class Terminal {
    private var saved = termios()
    private var raw = false

    /// True when both standard input and standard output are a terminal.
    static var isInteractive: Bool { isatty(STDIN_FILENO) == 1 && isatty(STDOUT_FILENO) == 1 }

    /// Keys without line editing or echo; the cursor hidden, the screen cleared.
    func enterRawMode() {
        guard !raw, tcgetattr(STDIN_FILENO, &saved) == 0 else { return }
        var t = saved
        t.c_lflag &= ~tcflag_t(ICANON | ECHO)
        withUnsafeMutableBytes(of: &t.c_cc) { cc in
            cc[Int(VMIN)] = 1
            cc[Int(VTIME)] = 0
        }
        tcsetattr(STDIN_FILENO, TCSANOW, &t)
        raw = true
        write("\u{1B}[?25l\u{1B}[2J\u{1B}[H")
    }

    /// The terminal as it was, the cursor shown again below the screen.
    func restore() {
        guard raw else { return }
        raw = false
        tcsetattr(STDIN_FILENO, TCSANOW, &saved)
        write("\u{1B}[?25h\n")
    }

    /// The keys typed since the last call (none without waiting).
    func readKeys() -> [UInt8] {
        var fds = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
        guard poll(&fds, 1, 0) > 0, fds.revents & Int16(POLLIN) != 0 else { return [] }
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = read(STDIN_FILENO, &buffer, buffer.count)
        return n > 0 ? Array(buffer.prefix(n)) : []
    }

    /// Draws `lines` from the top left, each line cleared to its end, and clears what is below.
    func draw(_ lines: [String]) {
        write("\u{1B}[H" + lines.map { $0 + "\u{1B}[K" }.joined(separator: "\r\n") + "\u{1B}[J")
    }

    private func write(_ text: String) {
        StandardStream.output(text)
    }
}

/// The karaoke run on a terminal: the song's position as a progress bar, level meters, the volumes, key and round
/// trip, xruns and drops, the outputs, the last device event, and the keys that change them. It draws the session's
/// snapshots (``KaraokeSnapshot``, from the run's one ``SnapshotMonitor``) and acts through ``KaraokeControl``s:
/// one client of the session among others (the web stage).
final class KaraokeScreen {
    let room: KaraokeRoom
    var title: String

    init(room: KaraokeRoom, title: String) {
        self.room = room
        self.title = title
    }

    /// What a key does; nil for a key that does nothing (`q` is the caller's).
    static func control(for key: UInt8) -> KaraokeControl? {
        switch key {
        case UInt8(ascii: "a"): .stepVolume(.accompaniment, by: -1)
        case UInt8(ascii: "A"): .stepVolume(.accompaniment, by: 1)
        case UInt8(ascii: "v"): .stepVolume(.voice, by: -1)
        case UInt8(ascii: "V"): .stepVolume(.voice, by: 1)
        case UInt8(ascii: "m"): .stepVolume(.monitorVoice, by: -1)
        case UInt8(ascii: "M"): .stepVolume(.monitorVoice, by: 1)
        case UInt8(ascii: "1"): .toggleMuted(.accompaniment)
        case UInt8(ascii: "2"): .toggleMuted(.voice)
        case UInt8(ascii: "k"): .stepKey(semitones: -1)
        case UInt8(ascii: "K"): .stepKey(semitones: 1)
        case UInt8(ascii: " "): .togglePause
        default: nil
        }
    }

    static let help = [
        "keys: a/A accompaniment -/+1 dB   v/V voice in the song   m/M voice in the headphones",
        "      k/K key -/+1 semitone   1/2 mute accompaniment/voice   space pause/resume   n next song   q quit",
    ]

    /// Applies one key (`q` is the caller's); returns a note for the screen when it could not.
    func handle(_ key: UInt8) -> String? {
        guard let control = Self.control(for: key) else { return nil }
        do throws(AudioError) { try room.perform(control) } catch { return error.message }
        return nil
    }

    /// The screen's lines now (about 100 columns; an output's line is as long as its figures).
    func lines(_ snapshot: KaraokeSnapshot, event: String, note: String?) -> [String] {
        // The bar runs over the region that plays (--start, --end; each pass of a --loop), not the whole file.
        let regionStart = snapshot.regionStart
        let regionEnd = snapshot.regionEnd
        let position = snapshot.position
        let length = regionEnd
        let state: String = snapshot.songState == .paused ? "PAUSED" : snapshot.songState.rawValue
        let fraction = regionEnd > regionStart ? min(1, max(0, (position - regionStart) / (regionEnd - regionStart))) : 0
        let width = 60
        let done = Int((fraction * Double(width)).rounded(.down))
        let bar = "[" + String(repeating: "#", count: done) + String(repeating: "-", count: width - done) + "]"
        let s = snapshot
        func meter(_ name: String, _ r: LevelReading, _ extra: String) -> String {
            let dB = r.peak ?? -.infinity
            let cells = 30
            let lit = dB == -.infinity ? 0 : Int(((max(-60, min(0, dB)) + 60) / 60 * Double(cells)).rounded())
            let level = dB == -.infinity ? "  -inf" : String(cFormat: "%6.1f", dB)
            return name.padded(to: 14) + "[" + String(repeating: "=", count: lit)
                + String(repeating: " ", count: cells - lit) + "] " + level + " dB  " + extra
        }
        func volume(_ dB: Double) -> String { dB == -.infinity ? "-inf dB" : String(cFormat: "%+.1f dB", dB) }
        let voiceExtra = "song " + volume(s.voiceVolume) + ", headphones " + volume(s.monitorVoiceVolume)
            + (s.isVoiceMuted ? "  MUTED" : "")
        let accompanimentExtra = "volume " + volume(s.accompanimentVolume) + (s.isAccompanimentMuted ? "  MUTED" : "")
        var lines = [
            "liveaudio karaoke - \(title)  [\(state)]",
            bar + " \(Self.clock(position)) / \(Self.clock(length))",
            meter("voice", s.voice, voiceExtra),
        ]
        for (i, v) in s.voices.enumerated() { lines.append(meter("  voice \(i + 1)", v, "")) }
        lines += [
            meter("accompaniment", s.accompaniment, accompanimentExtra),
            meter("output", s.output, ""),
            "loudness      " + s.loudness.statusText + "  (the song)"
                + (s.loudness.integrated.isFinite ? String(cFormat: "  range %.1f LU  true peak %.1f dBTP", s.loudness.loudnessRange, s.loudness.truePeak) : ""),
            String(cFormat: "key %+.1f  tempo %.2f  round trip %.2f ms", s.keyCents / 100, s.tempo, s.roundTripMilliseconds)
                + " (\(s.roundTripSource))  xruns \(s.xruns)  drops \(s.droppedFrames)  underruns \(s.underruns)",
        ]
        if let singing = s.singAlong { lines += Self.singAlong(singing, keySemitones: Int((s.keyCents / 100).rounded())) }
        for output in s.outputs { lines.append("-> \(output)") }
        lines.append(event.isEmpty ? "" : "device: \(event)")
        lines.append(note ?? "")
        lines += Self.help
        return lines
    }

    /// The lyrics (the line being sung, its syllable in reverse video, the next line below), with a chart's notes
    /// the pitch lane (the line's notes as bars, a row a semitone, the voice's pitch `o` at the time now `|`), and
    /// the score with the last line's rating.
    static func singAlong(_ s: SingAlongReadout, keySemitones: Int = 0) -> [String] {
        var lines = [""]
        if let line = s.line, line.start - s.position < 3 {
            var text = "  "
            for (i, syllable) in line.syllables.enumerated() {
                text += i == s.syllableIndex ? "\u{1B}[7m" + syllable.text + "\u{1B}[27m" : syllable.text
            }
            lines.append(text)
        } else {
            lines.append("")
        }
        lines.append("  \u{1B}[2m" + (s.nextLine?.text ?? "") + "\u{1B}[22m")
        guard let score = s.score else { return lines }
        lines += pitchLane(s, keySemitones: keySemitones)
        var scoreLine = "score \(score.total)  (notes \(Int(score.notes.rounded())), golden \(Int(score.golden.rounded())), "
            + "line bonus \(Int(score.lineBonus.rounded())))"
        if let last = score.lines.last {
            scoreLine += "  last line: \(last.rating) \(Int((last.hitRatio * 100).rounded())) %"
        }
        lines.append(scoreLine)
        return lines
    }

    /// The pitch lane of the line being sung: 60 columns over its time, a row a semitone over its notes' range (at
    /// most 13 rows), `=` a note, `*` a golden one, `|` now, `o` the voice (folded by octaves into the lane, less
    /// the key change: the bars stand for the notes as the song now plays them).
    static func pitchLane(_ s: SingAlongReadout, keySemitones: Int = 0) -> [String] {
        guard let line = s.line else { return [] }
        let notes = line.syllables.compactMap { syllable in syllable.note.map { (syllable, $0) } }.filter { $0.1.kind.hasPitch }
        guard let low = notes.map(\.1.midiNote).min(), let high = notes.map(\.1.midiNote).max() else { return [] }
        let top = min(high, low + 12)
        let width = 60
        let span = max(line.end - line.start, 0.001)
        func column(_ t: Double) -> Int { max(0, min(width - 1, Int(((t - line.start) / span * Double(width)).rounded(.down)))) }
        var rows = [[Character]](repeating: [Character](repeating: " ", count: width), count: top - low + 1)
        for (syllable, note) in notes {
            // A line spanning more than an octave: its high notes folded an octave down into the lane.
            var m = note.midiNote
            while m > top { m -= 12 }
            guard m >= low else { continue }
            for c in column(syllable.start)...max(column(syllable.start), column(syllable.end) - 1) {
                rows[top - m][c] = note.kind == .golden ? "*" : "="
            }
        }
        // Now, while the line is sung (before it, the lane waits).
        guard s.position >= line.start, s.position < line.end else { return rows.map { "  " + String($0) } }
        let now = column(s.position)
        for r in rows.indices where rows[r][now] == " " { rows[r][now] = "|" }
        if let sung = s.sung, sung.voiced, let midi = sung.midiNote {
            // In the key the song plays: a singer following a key change up is on the (unmoved) bars.
            var m = midi - Double(keySemitones)
            let centre = Double(low + top) / 2
            while m - centre > 6 { m -= 12 }
            while centre - m > 6 { m += 12 }
            let row = top - Int(m.rounded())
            if rows.indices.contains(row) { rows[row][now] = "o" }
        }
        return rows.map { "  " + String($0) }
    }

    static func clock(_ seconds: Double) -> String {
        let s = max(0, seconds)
        return String(cFormat: "%ld:%04.1f", Int(s) / 60, s.truncatingRemainder(dividingBy: 60))
    }
}

/// A progress line on a terminal: `render`, `encode` and `stream` show how far they are on standard error, redrawn in
/// place ten times a second, and take it away when they end. Off a terminal (a pipe, a file, a test) it draws nothing,
/// and what the commands print stays as it was.
final class ProgressLine {
    let label: String
    /// The total in seconds, when known: a bar and a percentage; otherwise the seconds done only.
    let total: Double?
    let enabled: Bool
    private var lastDraw: UInt64 = 0
    private var shown = false

    init(_ label: String, total: Double?, enabled: Bool = isatty(STDERR_FILENO) == 1) {
        self.label = label
        self.total = total.flatMap { $0 > 0 && $0.isFinite ? $0 : nil }
        self.enabled = enabled
    }

    /// The line for `done` seconds (and, for a stream, what follows it).
    func text(done: Double, extra: String = "") -> String {
        var line = label
        if let total {
            let fraction = min(1, max(0, done / total))
            let width = 30
            let filled = Int((fraction * Double(width)).rounded(.down))
            line += " [" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "] "
            line += String(cFormat: "%.1f / %.1f s %3.0f%%", done, total, fraction * 100)
        } else {
            line += String(cFormat: " %.1f s", done)
        }
        return extra.isEmpty ? line : line + "  " + extra
    }

    /// Redraws the line, at most ten times a second (always with `force`).
    func update(done: Double, extra: String = "", force: Bool = false) {
        guard enabled else { return }
        let now = monotonicNanoseconds()
        guard force || now - lastDraw >= 100_000_000 else { return }
        lastDraw = now
        shown = true
        StandardStream.error("\r\u{1B}[K" + text(done: done, extra: extra))
    }

    /// Prints `line` on standard output above the progress line (which the next update draws again).
    func printAbove(_ line: String) {
        clear()
        StandardStream.output(line + "\n")
    }

    /// Takes the line away.
    func clear() {
        guard enabled, shown else { return }
        shown = false
        StandardStream.error("\r\u{1B}[K")
    }
}
