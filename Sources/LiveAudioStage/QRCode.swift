import AudioCore
import CQRencode

/// A QR code symbol (ISO/IEC 18004) of a text, made by libqrencode: the join address the big screen shows for
/// phones to scan.
public struct QRCode: Sendable, Equatable {
    /// Modules per side (21 for version 1, 4 more a version).
    public let size: Int
    /// The modules, row by row: true for dark.
    public let modules: [Bool]

    /// The symbol of `text` (8-bit mode, error correction level M: a phone reads it off a screen across a room).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` when the text is empty or too long for a QR code.
    public init(_ text: String) throws(AudioError) {
        guard !text.isEmpty, text.utf8.count <= 2000 else {
            throw AudioError(.invalidParameter, "a QR code holds 1 … 2000 bytes, got \(text.utf8.count)")
        }
        guard let code = QRcode_encodeString8bit(text, 0, QR_ECLEVEL_M) else {
            throw AudioError(.invalidParameter, "libqrencode could not encode \(text.utf8.count) bytes")
        }
        defer { QRcode_free(code) }
        let width = Int(code.pointee.width)
        size = width
        // Bit 0 of each byte: dark.
        modules = (0..<width * width).map { code.pointee.data[$0] & 1 == 1 }
    }

    /// Whether the module at `row`, `column` is dark.
    public func isDark(row: Int, column: Int) -> Bool { modules[row * size + column] }

    /// The symbol as an SVG image: a path of unit squares with a 4-module quiet zone, dark on white, scaled by the
    /// page (`viewBox`), crisp at any size.
    public var svg: String {
        let side = size + 8
        var path = ""
        for row in 0..<size {
            var column = 0
            while column < size {
                guard isDark(row: row, column: column) else {
                    column += 1
                    continue
                }
                // A run of dark modules as one rectangle.
                var end = column
                while end < size, isDark(row: row, column: end) { end += 1 }
                path += "M\(column + 4) \(row + 4)h\(end - column)v1h-\(end - column)z"
                column = end
            }
        }
        return "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 \(side) \(side)\" shape-rendering=\"crispEdges\">"
            + "<rect width=\"\(side)\" height=\"\(side)\" fill=\"#fff\"/><path fill=\"#000\" d=\"\(path)\"/></svg>"
    }

    /// The symbol as a binary PGM image (`scale` pixels a module, a 4-module quiet zone): what a decoder reads.
    public func pgm(scale: Int = 4) -> [UInt8] {
        let side = (size + 8) * scale
        var bytes = Array("P5\n\(side) \(side)\n255\n".utf8)
        bytes.reserveCapacity(bytes.count + side * side)
        for y in 0..<side {
            let row = y / scale - 4
            for x in 0..<side {
                let column = x / scale - 4
                let dark = row >= 0 && row < size && column >= 0 && column < size && isDark(row: row, column: column)
                bytes.append(dark ? 0 : 255)
            }
        }
        return bytes
    }
}
