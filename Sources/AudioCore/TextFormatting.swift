#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension String {
    /// C's `printf` formatting (through `vsnprintf`, in the C locale: a point for the decimal separator whatever
    /// the user's locale), for the tool's and the sessions' reports: `String(cFormat: "%.3f s", seconds)`.
    /// Arguments are C's: `Double` for `%f`/`%g`, `Int` for `%ld`, `Int32` for `%d`; text goes in by
    /// interpolation, not `%s`. Not for the render thread (it allocates).
    package init(cFormat format: String, _ arguments: any CVarArg...) {
        let needed = withVaList(arguments) { vsnprintf(nil, 0, format, $0) }
        guard needed > 0 else {
            self = ""
            return
        }
        var bytes = [CChar](repeating: 0, count: Int(needed) + 1)
        let count = bytes.count
        _ = bytes.withUnsafeMutableBufferPointer { buffer in
            withVaList(arguments) { vsnprintf(buffer.baseAddress, count, format, $0) }
        }
        self = bytes.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    /// `value` with two decimals, as `%.2f` writes it: latencies and durations in milliseconds or seconds.
    package init(format2 value: Double) { self.init(cFormat: "%.2f", value) }
}

/// File paths as text, the way the tool and the sessions need them (NSString's path methods, without Foundation).
package enum FilePath {
    /// `name` inside `folder`: `"a/b" + "c.wav"` → `"a/b/c.wav"`; an absolute `name` or an empty folder gives `name`.
    package static func join(_ folder: String, _ name: String) -> String {
        if name.hasPrefix("/") || folder.isEmpty { return name }
        return folder.hasSuffix("/") ? folder + name : folder + "/" + name
    }

    /// The folder a file is in: `"a/b/c.wav"` → `"a/b"`, `"/c.wav"` → `"/"`, `"c.wav"` → `"."` (the current
    /// folder; trailing slashes ignored).
    package static func folder(of path: String) -> String {
        var p = Substring(path)
        while p.count > 1, p.hasSuffix("/") { p = p.dropLast() }
        guard let slash = p.lastIndex(of: "/") else { return "." }
        if slash == p.startIndex { return "/" }
        var folder = p[..<slash]
        while folder.count > 1, folder.hasSuffix("/") { folder = folder.dropLast() }
        return String(folder)
    }

    /// The last part: `"a/b/c.wav"` → `"c.wav"` (trailing slashes ignored).
    package static func lastComponent(_ path: String) -> String {
        var p = Substring(path)
        while p.count > 1, p.hasSuffix("/") { p = p.dropLast() }
        guard let slash = p.lastIndex(of: "/"), p.count > 1 else { return String(p) }
        return String(p[p.index(after: slash)...])
    }
}

/// Unbuffered writes to the standard output and error: a log or a pipe gets each line as it is written (what
/// FileHandle's `write` did, without Foundation).
package enum StandardStream {
    /// Writes all of `text` to the standard error.
    package static func error(_ text: String) { write(text, to: 2) }
    /// Writes all of `text` to the standard output, unbuffered (flush `print`'s buffer first if both are used).
    package static func output(_ text: String) { write(text, to: 1) }

    private static func write(_ text: String, to descriptor: Int32) {
        var text = text
        text.withUTF8 { bytes in
            var done = 0
            while done < bytes.count {
                #if canImport(Glibc)
                let n = Glibc.write(descriptor, bytes.baseAddress! + done, bytes.count - done)
                #else
                let n = Darwin.write(descriptor, bytes.baseAddress! + done, bytes.count - done)
                #endif
                if n < 0, errno == EINTR { continue }
                if n <= 0 { return }  // a closed pipe: nothing more can go there
                done += n
            }
        }
    }
}

extension StringProtocol {
    /// The text without the spaces, tabs and line breaks at either end.
    package func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0.isWhitespace || $0.isNewline }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[first...last])
    }
}

extension String {
    /// The text cut or filled with spaces on the right to `width` characters: a column of a table.
    package func padded(to width: Int) -> String {
        count >= width ? String(prefix(width)) : self + String(repeating: " ", count: width - count)
    }
}

extension String {
    /// The text as a JSON string literal: quotes, backslashes and control characters escaped, and `<`, U+2028 and
    /// U+2029 as well (so that the JSON can sit inside a page's script as it is).
    package var jsonLiteral: String {
        var out = "\""
        for scalar in unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "<": out += "\\u003c"
            default:
                if scalar.value < 0x20 || scalar.value == 0x2028 || scalar.value == 0x2029 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}

/// A level to one decimal, or "-inf" for none: "-14.2", "-14.2 LUFS", "-inf dBTP".
package func formatLevel(_ value: Double, _ unit: String = "") -> String {
    (value.isFinite ? String(cFormat: "%.1f", value) : "-inf") + (unit.isEmpty ? "" : " " + unit)
}
