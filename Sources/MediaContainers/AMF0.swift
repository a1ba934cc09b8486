import AudioCore

/// An AMF0 value (Action Message Format 0): what FLV script tags and RTMP commands carry.
///
/// Objects and ECMA arrays keep their properties in order, because the order is what goes on the wire.
public indirect enum AMF0Value: Hashable, Sendable {
    /// A number: an IEEE 754 double (marker 0x00).
    case number(Double)
    /// A boolean (marker 0x01).
    case boolean(Bool)
    /// A string; written as a long string (marker 0x0C) when its UTF-8 is longer than 65535 bytes.
    case string(String)
    /// An anonymous object (marker 0x03): its properties in order. A typed object is read as one too.
    case object([AMF0Property])
    /// Null (marker 0x05).
    case null
    /// Undefined (marker 0x06); an unsupported value (marker 0x0D) is read as this too.
    case undefined
    /// An associative array (marker 0x08): properties with a count hint in front.
    case ecmaArray([AMF0Property])
    /// A dense array (marker 0x0A): its values in order.
    case strictArray([AMF0Value])
    /// Milliseconds since 1970 and a time zone (which AMF0 says to write as 0 and ignore).
    case date(milliseconds: Double, timeZone: Int16)

    /// The property `key` of an object or ECMA array, or nil.
    public subscript(key: String) -> AMF0Value? {
        switch self {
        case .object(let properties), .ecmaArray(let properties): properties.first { $0.key == key }?.value
        default: nil
        }
    }

    /// The number of a `.number`, or nil.
    public var numberValue: Double? { if case .number(let v) = self { v } else { nil } }
    /// The text of a `.string`, or nil.
    public var stringValue: String? { if case .string(let v) = self { v } else { nil } }
    /// The value of a `.boolean`, or nil.
    public var booleanValue: Bool? { if case .boolean(let v) = self { v } else { nil } }
}

/// One key–value pair of an AMF0 object or ECMA array.
public struct AMF0Property: Hashable, Sendable {
    /// The property's name (written as a short string: at most 65535 bytes of UTF-8).
    public var key: String
    /// The property's value.
    public var value: AMF0Value

    /// The property `key` with `value`.
    /// - Parameters:
    ///   - key: the property's name.
    ///   - value: the property's value.
    public init(_ key: String, _ value: AMF0Value) {
        self.key = key
        self.value = value
    }
}

/// AMF0 encoding and decoding.
public enum AMF0 {
    enum Marker: UInt8 {
        case number = 0x00, boolean = 0x01, string = 0x02, object = 0x03, movieClip = 0x04, null = 0x05
        case undefined = 0x06, reference = 0x07, ecmaArray = 0x08, objectEnd = 0x09, strictArray = 0x0A
        case date = 0x0B, longString = 0x0C, unsupported = 0x0D, recordSet = 0x0E, xmlDocument = 0x0F
        case typedObject = 0x10, avmPlus = 0x11
    }

    /// Nesting deeper than this is treated as corrupt input (a guard against stack exhaustion).
    public static let maximumDepth = 64

    /// The bytes of `values`, one after another.
    public static func encode(_ values: [AMF0Value]) -> [UInt8] {
        var out: [UInt8] = []
        for v in values { encode(v, into: &out) }
        return out
    }

    /// Appends the bytes of `value` to `out`.
    /// - Parameters:
    ///   - value: the value to encode.
    ///   - out: the bytes the encoding is appended to.
    public static func encode(_ value: AMF0Value, into out: inout [UInt8]) {
        switch value {
        case .number(let v):
            out.append(Marker.number.rawValue)
            appendDouble(v, into: &out)
        case .boolean(let b):
            out += [Marker.boolean.rawValue, b ? 1 : 0]
        case .string(let s):
            let utf8 = Array(s.utf8)
            if utf8.count > 0xFFFF {
                out.append(Marker.longString.rawValue)
                appendUInt32(UInt32(utf8.count), into: &out)
                out += utf8
            } else {
                out.append(Marker.string.rawValue)
                appendShortString(utf8, into: &out)
            }
        case .object(let properties):
            out.append(Marker.object.rawValue)
            appendProperties(properties, into: &out)
        case .null:
            out.append(Marker.null.rawValue)
        case .undefined:
            out.append(Marker.undefined.rawValue)
        case .ecmaArray(let properties):
            out.append(Marker.ecmaArray.rawValue)
            appendUInt32(UInt32(properties.count), into: &out)
            appendProperties(properties, into: &out)
        case .strictArray(let values):
            out.append(Marker.strictArray.rawValue)
            appendUInt32(UInt32(values.count), into: &out)
            for v in values { encode(v, into: &out) }
        case .date(let ms, let zone):
            out.append(Marker.date.rawValue)
            appendDouble(ms, into: &out)
            out += [UInt8(truncatingIfNeeded: zone >> 8), UInt8(truncatingIfNeeded: zone)]
        }
    }

    /// Decodes values until `bytes` ends.
    /// - Throws: ``/AudioCore/AudioError`` `.corruptFile` for truncated input, an unknown or unsupported marker,
    ///   invalid UTF-8, or nesting deeper than ``maximumDepth``; the message gives the byte offset.
    public static func decodeAll(_ bytes: [UInt8]) throws(AudioError) -> [AMF0Value] {
        var reader = AMF0Reader(bytes)
        var values: [AMF0Value] = []
        while !reader.atEnd { values.append(try reader.value()) }
        return values
    }

    static func appendDouble(_ v: Double, into out: inout [UInt8]) {
        let bits = v.bitPattern
        for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
    }

    static func appendUInt32(_ v: UInt32, into out: inout [UInt8]) {
        out += [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)]
    }

    static func appendShortString(_ utf8: [UInt8], into out: inout [UInt8]) {
        let n = min(utf8.count, 0xFFFF)
        out += [UInt8(n >> 8), UInt8(n & 0xFF)]
        out += utf8.prefix(n)
    }

    static func appendProperties(_ properties: [AMF0Property], into out: inout [UInt8]) {
        for p in properties {
            appendShortString(Array(p.key.utf8), into: &out)
            encode(p.value, into: &out)
        }
        out += [0, 0, Marker.objectEnd.rawValue]
    }
}

/// Reads AMF0 values from bytes, one at a time.
public struct AMF0Reader {
    private var cursor: AMFCursor
    /// Objects, typed objects, ECMA arrays and strict arrays in the order they began: what a reference (marker
    /// 0x07) points into. A reference stands for the whole value, so the values references expand to are counted
    /// and bounded (see ``AMF3Reader/maximumExpandedValues``).
    private var references = AMFReferenceTable()

    /// The bytes not read yet: from ``offset`` to the end of the input.
    public var remaining: ArraySlice<UInt8> { cursor.bytes[min(cursor.offset, cursor.bytes.count)...] }
    /// The offset of the next value.
    public var offset: Int { cursor.offset }

    /// A reader of `bytes` whose first value starts at `offset`.
    /// - Parameters:
    ///   - bytes: the bytes to read.
    ///   - offset: the byte offset of the first value (default 0).
    public init(_ bytes: [UInt8], offset: Int = 0) {
        cursor = AMFCursor(bytes: bytes, offset: offset, format: "AMF0")
    }

    /// True when no bytes are left to read.
    public var atEnd: Bool { cursor.remaining <= 0 }

    /// The next value.
    /// - Throws: ``/AudioCore/AudioError`` `.corruptFile` (see ``AMF0/decodeAll(_:)``).
    public mutating func value() throws(AudioError) -> AMF0Value { try value(depth: 0) }

    private mutating func value(depth: Int) throws(AudioError) -> AMF0Value {
        guard depth < AMF0.maximumDepth else { throw cursor.fail("values nested more than \(AMF0.maximumDepth) deep") }
        try references.tally(1, cursor)
        let at = cursor.offset
        let byte = try cursor.byte()
        guard let marker = AMF0.Marker(rawValue: byte) else {
            throw AudioError(.corruptFile, "AMF0: unknown type marker \(hexByte(Int(byte))) at byte \(at)")
        }
        switch marker {
        case .number: return .number(try cursor.double())
        case .boolean: return .boolean(try cursor.byte() != 0)
        case .string, .longString, .xmlDocument:
            let text = try cursor.utf8(length: marker == .string ? Int(try cursor.uint16()) : Int(try cursor.uint32()))
            try references.tally(string: text, cursor)
            return .string(text)
        case .object:
            let slot = references.reserve()
            return references.fill(slot, .object(try properties(depth: depth)))
        case .typedObject:
            // The class name is the reader's business; the members are an object's.
            _ = try cursor.utf8(length: Int(try cursor.uint16()))
            let slot = references.reserve()
            return references.fill(slot, .object(try properties(depth: depth)))
        case .null: return .null
        case .undefined: return .undefined
        case .ecmaArray:
            _ = try cursor.uint32()  // a count hint; the end marker is what ends the array
            let slot = references.reserve()
            return references.fill(slot, .ecmaArray(try properties(depth: depth)))
        case .strictArray:
            let count = Int(try cursor.uint32())
            // Each value takes at least one byte: a count beyond what is left is corrupt.
            guard count <= cursor.remaining else {
                throw cursor.fail("a strict array of \(count) values in \(cursor.remaining) bytes")
            }
            let slot = references.reserve()
            var values: [AMF0Value] = []
            values.reserveCapacity(count)
            for _ in 0..<count { values.append(try value(depth: depth + 1)) }
            return references.fill(slot, .strictArray(values))
        case .date:
            let ms = try cursor.double()
            let zone = Int16(bitPattern: try cursor.uint16())
            return .date(milliseconds: ms, timeZone: zone)
        case .reference:
            return try references.reference(Int(try cursor.uint16()), depth: depth, cursor)
        case .unsupported: return .undefined
        case .avmPlus:
            // The value that follows is AMF3 (AMF3 command and data messages switch for their complex values).
            // It counts towards this reader's bound.
            var reader = AMF3Reader(cursor.bytes, offset: cursor.offset, expanded: references.expanded - 1)
            let value = try reader.value(depth: depth)
            cursor.offset = reader.offset
            try references.tally(reader.expanded - references.expanded, cursor)
            return value
        case .objectEnd, .movieClip, .recordSet:
            throw AudioError(.corruptFile, "AMF0: type marker \(hexByte(Int(byte))) at byte \(at) is not supported here")
        }
    }

    private mutating func properties(depth: Int) throws(AudioError) -> [AMF0Property] {
        var result: [AMF0Property] = []
        while true {
            let key = try cursor.utf8(length: Int(try cursor.uint16()))
            try references.tally(string: key, cursor)
            if key.isEmpty, cursor.remaining > 0, cursor.bytes[cursor.offset] == AMF0.Marker.objectEnd.rawValue {
                cursor.offset += 1
                return result
            }
            result.append(AMF0Property(key, try value(depth: depth + 1)))
        }
    }
}
