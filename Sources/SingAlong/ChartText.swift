/// The text of a chart or lyrics file: its bytes cut into lines and decoded. Charts are UTF-8 (with or without a
/// byte order mark) by the UltraStar format's version 1; older files are often Windows code pages, named by an
/// `#ENCODING` header or not named at all.
enum ChartText {
    enum Encoding: String, CaseIterable {
        case utf8 = "UTF-8"
        case cp1252 = "CP1252"
        case cp1250 = "CP1250"

        /// The encoding an `#ENCODING` value names (case-insensitive; `UTF8`, `WINDOWS-1252` and the like too).
        init?(name: String) {
            let n = name.uppercased().filter { $0 != "-" && $0 != "_" && $0 != " " }
            switch n {
            case "UTF8": self = .utf8
            case "CP1252", "WINDOWS1252", "LATIN1", "ISO88591", "AUTO": self = .cp1252
            case "CP1250", "WINDOWS1250": self = .cp1250
            default: return nil
            }
        }
    }

    /// The bytes without a leading UTF-8 byte order mark.
    static func withoutByteOrderMark(_ bytes: [UInt8]) -> ArraySlice<UInt8> {
        bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? bytes.dropFirst(3) : bytes[...]
    }

    /// A file's bytes as UTF-8 when a byte order mark says what they are: a UTF-8 mark is dropped; UTF-16 (LE or BE,
    /// as Windows editors save "Unicode") is decoded and re-encoded as UTF-8, with a note for the warnings (unpaired
    /// surrogates become U+FFFD). Without a mark, the bytes as they are.
    static func unwrapped(_ bytes: [UInt8]) -> (bytes: [UInt8], hadByteOrderMark: Bool, note: String?) {
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { return (Array(bytes.dropFirst(3)), true, nil) }
        let littleEndian = bytes.starts(with: [0xFF, 0xFE])
        guard littleEndian || bytes.starts(with: [0xFE, 0xFF]) else { return (bytes, false, nil) }
        var units: [UInt16] = []
        units.reserveCapacity(bytes.count / 2)
        var i = 2
        while i + 1 < bytes.count {
            let a = UInt16(bytes[i]), b = UInt16(bytes[i + 1])
            units.append(littleEndian ? a | b << 8 : a << 8 | b)
            i += 2
        }
        var utf8: [UInt8] = []
        utf8.reserveCapacity(units.count)
        var iterator = units.makeIterator()
        var decoder = UTF16()
        loop: while true {
            switch decoder.decode(&iterator) {
            case .scalarValue(let scalar): utf8.append(contentsOf: String(scalar).utf8)
            case .error: utf8.append(contentsOf: [0xEF, 0xBF, 0xBD])
            case .emptyInput: break loop
            }
        }
        let odd = bytes.count % 2 == 1 ? " (its odd last byte dropped)" : ""
        return (utf8, true, "the file is UTF-16 \(littleEndian ? "LE" : "BE") (a byte order mark): read as such\(odd)")
    }

    /// The lines of `bytes`, cut at CR, LF or CR LF (the same bytes in every encoding here); the end of the input
    /// ends the last line.
    static func lines(_ bytes: ArraySlice<UInt8>) -> [ArraySlice<UInt8>] {
        var lines: [ArraySlice<UInt8>] = []
        var start = bytes.startIndex
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let b = bytes[i]
            if b == 0x0A || b == 0x0D {
                lines.append(bytes[start..<i])
                if b == 0x0D, i + 1 < bytes.endIndex, bytes[i + 1] == 0x0A { i += 1 }
                start = i + 1
            }
            i += 1
        }
        if start < bytes.endIndex { lines.append(bytes[start..<bytes.endIndex]) }
        return lines
    }

    /// What a file's line ends say when they are not the usual ones: "CR-only line ends" (old Mac editors),
    /// "mixed line ends"; nil for LF or CR LF throughout.
    static func lineEndingNote(_ bytes: ArraySlice<UInt8>) -> String? {
        var lf = false, crlf = false, cr = false
        var i = bytes.startIndex
        while i < bytes.endIndex {
            if bytes[i] == 0x0D {
                if i + 1 < bytes.endIndex, bytes[i + 1] == 0x0A {
                    crlf = true
                    i += 1
                } else {
                    cr = true
                }
            } else if bytes[i] == 0x0A {
                lf = true
            }
            i += 1
        }
        let kinds = [lf, crlf, cr].filter { $0 }.count
        if kinds > 1 { return "mixed line ends (\([lf ? "LF" : nil, crlf ? "CR LF" : nil, cr ? "CR" : nil].compactMap { $0 }.joined(separator: ", "))): each read as a line end" }
        if cr { return "CR-only line ends: each read as a line end" }
        return nil
    }

    static func isValidUTF8(_ bytes: ArraySlice<UInt8>) -> Bool {
        var iterator = bytes.makeIterator()
        var decoder = UTF8()
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue: continue
            case .emptyInput: return true
            case .error: return false
            }
        }
    }

    static func decode(_ bytes: ArraySlice<UInt8>, as encoding: Encoding) -> String {
        switch encoding {
        case .utf8: return String(decoding: bytes, as: UTF8.self)
        case .cp1252, .cp1250:
            let table = encoding == .cp1252 ? cp1252 : cp1250
            var scalars = String.UnicodeScalarView()
            for b in bytes {
                let value = b < 0x80 ? UInt32(b) : UInt32(table[Int(b) - 0x80])
                scalars.append(Unicode.Scalar(value) ?? "\u{FFFD}")
            }
            return String(scalars)
        }
    }

    /// Windows-1252 and Windows-1250, bytes 0x80…0xFF (U+FFFD where the code page has no character).
    static let cp1252: [UInt16] = [
        0x20AC, 0xFFFD, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0xFFFD,
        0x017D, 0xFFFD, 0xFFFD, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A,
        0x0153, 0xFFFD, 0x017E, 0x0178,
    ] + (0xA0...0xFF).map { UInt16($0) }
    static let cp1250: [UInt16] = [
        0x20AC, 0xFFFD, 0x201A, 0xFFFD, 0x201E, 0x2026, 0x2020, 0x2021, 0xFFFD, 0x2030, 0x0160, 0x2039, 0x015A, 0x0164,
        0x017D, 0x0179, 0xFFFD, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0xFFFD, 0x2122, 0x0161, 0x203A,
        0x015B, 0x0165, 0x017E, 0x017A, 0x00A0, 0x02C7, 0x02D8, 0x0141, 0x00A4, 0x0104, 0x00A6, 0x00A7, 0x00A8, 0x00A9,
        0x015E, 0x00AB, 0x00AC, 0x00AD, 0x00AE, 0x017B, 0x00B0, 0x00B1, 0x02DB, 0x0142, 0x00B4, 0x00B5, 0x00B6, 0x00B7,
        0x00B8, 0x0105, 0x015F, 0x00BB, 0x013D, 0x02DD, 0x013E, 0x017C, 0x0154, 0x00C1, 0x00C2, 0x0102, 0x00C4, 0x0139,
        0x0106, 0x00C7, 0x010C, 0x00C9, 0x0118, 0x00CB, 0x011A, 0x00CD, 0x00CE, 0x010E, 0x0110, 0x0143, 0x0147, 0x00D3,
        0x00D4, 0x0150, 0x00D6, 0x00D7, 0x0158, 0x016E, 0x00DA, 0x0170, 0x00DC, 0x00DD, 0x0162, 0x00DF, 0x0155, 0x00E1,
        0x00E2, 0x0103, 0x00E4, 0x013A, 0x0107, 0x00E7, 0x010D, 0x00E9, 0x0119, 0x00EB, 0x011B, 0x00ED, 0x00EE, 0x010F,
        0x0111, 0x0144, 0x0148, 0x00F3, 0x00F4, 0x0151, 0x00F6, 0x00F7, 0x0159, 0x016F, 0x00FA, 0x0171, 0x00FC, 0x00FD,
        0x0163, 0x02D9,
    ]
}

extension Character {
    /// `isWhitespace` with ASCII answered without Unicode's property tables (a chart's spaces are ASCII; the tables
    /// were a third of a library scan).
    var isSpace: Bool {
        if let a = asciiValue { return a == 0x20 || (0x09...0x0D).contains(a) }
        return isWhitespace
    }
}

extension Substring {
    /// Without leading and trailing white space (Unicode `White_Space`).
    var trimmedWhitespace: Substring {
        var s = self
        while let c = s.first, c.isSpace { s.removeFirst() }
        while let c = s.last, c.isSpace { s.removeLast() }
        return s
    }
}

extension String {
    /// A decimal number as the chart formats write them: `120`, `120.5`, or with a decimal comma, `120,5`; nil for
    /// anything else (including infinities and NaN).
    static func chartNumber(_ text: Substring) -> Double? {
        let t = text.trimmedWhitespace
        guard !t.isEmpty, t.count <= 64,
            t.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == "." || $0 == "," || $0 == "-" || $0 == "+") })
        else { return nil }
        guard let value = Double(String(t).replacing(",", with: ".")), value.isFinite else { return nil }
        return value
    }
}
