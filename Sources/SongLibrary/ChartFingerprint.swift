import SingAlong

/// What identifies a song's singing apart from its file: a 128-bit hash (two FNV-1a 64 runs with different offsets)
/// of the tempo-free content — each part's notes (type, beat, length, pitch, syllable) or an LRC's lines (time and
/// text). A chart renamed, moved, re-encoded or given other headers (a corrected #GAP, a new #MP3) keeps its hash,
/// and so its scores; a changed note makes another song.
enum ChartFingerprint {
    struct Hasher {
        var a: UInt64 = 0xcbf2_9ce4_8422_2325
        var b: UInt64 = 0x6c62_272e_07bb_0142
        mutating func add(_ text: String) {
            for byte in text.utf8 { add(byte) }
            add(0x1F)
        }
        mutating func add(_ byte: UInt8) {
            a = (a ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
            b = (b ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
        }
        var hex: String {
            func digits(_ v: UInt64) -> String {
                let s = String(v, radix: 16)
                return String(repeating: "0", count: 16 - s.count) + s
            }
            return digits(a) + digits(b)
        }
    }

    /// The hash of a chart's notes (UltraStar) or words and times (LRC).
    static func of(_ chart: SongChart) -> String {
        var h = Hasher()
        for voice in chart.voices {
            h.add("P\(voice.number)")
            for line in voice.lines {
                h.add("-")
                for syllable in line.syllables {
                    if let note = syllable.note {
                        h.add("\(note.kind.rawValue) \(note.startBeat) \(note.beats) \(note.pitch)")
                    } else {
                        h.add("\(Int((syllable.start * 1000).rounded()))")
                    }
                    h.add(syllable.text)
                }
            }
        }
        return h.hex
    }

    /// The hash of a song known only by its audio file: its name and size.
    static func ofAudio(name: String, size: Int64) -> String {
        var h = Hasher()
        h.add("audio")
        h.add(name)
        h.add("\(size)")
        return h.hex
    }

    /// The hash of bytes that are no chart (a broken one): changes with every byte.
    static func ofBytes(_ bytes: [UInt8]) -> String {
        var h = Hasher()
        h.add("bytes")
        for byte in bytes { h.add(byte) }
        return h.hex
    }
}
