import AudioCore

/// Reads AMF3 values (Action Message Format 3): what RTMP's AMF3 command and data messages (types 17 and 15)
/// carry after an AMF0 "switch to AMF3" marker (0x11), and what some servers send there.
///
/// Values are read into ``AMF0Value``, the one model this library works with: integers and doubles become
/// numbers, XML and XML documents strings, dates dates, objects (sealed and dynamic members alike) objects, arrays
/// a strict array when they have no named part and an ECMA array (named part first, then the dense part under
/// the keys "0", "1", …) when they do, byte arrays and vectors strict arrays of their elements, dictionaries ECMA
/// arrays keyed by each key's text. References (to strings, to complex values and to traits) are resolved.
///
/// Malformed input — truncated, a reference past its table, nesting deeper than ``AMF0/maximumDepth``, a count
/// larger than the bytes left could hold, an externalizable object (whose encoding only its class knows) — is a
/// typed error, never a crash: every value read takes at least one byte, so the time and memory a hostile peer can
/// cost are bounded by what it sent.
public struct AMF3Reader {
    private var cursor: AMFCursor
    private var references: AMFReferenceTable
    private var strings: [String] = []
    private var traits: [Traits] = []

    /// The bytes not read yet: from ``offset`` to the end of the input.
    public var remaining: ArraySlice<UInt8> { cursor.bytes[min(cursor.offset, cursor.bytes.count)...] }
    /// The offset of the next value.
    public var offset: Int { cursor.offset }
    /// Values read so far, a reference counting as many as it stands for.
    var expanded: Int { references.expanded }

    /// The most values a reader expands to, references included: without a bound, a few hundred bytes of
    /// arrays that each refer twice to the one before stand for billions of values, which any walk over the
    /// result (comparing, printing) would take for ever to visit.
    public static let maximumExpandedValues = AMFReferenceTable.maximumExpandedValues

    private struct Traits {
        var externalizable: Bool
        var dynamic: Bool
        var className: String
        var members: [String]
    }

    enum Marker: UInt8 {
        case undefined = 0x00, null = 0x01, `false` = 0x02, `true` = 0x03, integer = 0x04, double = 0x05
        case string = 0x06, xmlDocument = 0x07, date = 0x08, array = 0x09, object = 0x0A, xml = 0x0B
        case byteArray = 0x0C, vectorInt = 0x0D, vectorUInt = 0x0E, vectorDouble = 0x0F, vectorObject = 0x10
        case dictionary = 0x11
    }

    /// A reader of `bytes` whose first value starts at `offset`, with empty reference tables.
    /// - Parameters:
    ///   - bytes: the bytes to read.
    ///   - offset: the byte offset of the first value (default 0).
    public init(_ bytes: [UInt8], offset: Int = 0) {
        self.init(bytes, offset: offset, expanded: 0)
    }

    /// A reader that goes on counting from what an AMF0 reader has expanded so far.
    init(_ bytes: [UInt8], offset: Int, expanded: Int) {
        cursor = AMFCursor(bytes: bytes, offset: offset, format: "AMF3")
        references = AMFReferenceTable(expanded: expanded)
    }

    /// True when no bytes are left to read.
    public var atEnd: Bool { cursor.remaining <= 0 }

    /// The next value.
    /// - Throws: ``/AudioCore/AudioError`` `.corruptFile`, naming what is wrong and the byte offset.
    public mutating func value() throws(AudioError) -> AMF0Value { try value(depth: 0) }

    /// Decodes values until `bytes` ends, with one set of reference tables.
    public static func decodeAll(_ bytes: [UInt8]) throws(AudioError) -> [AMF0Value] {
        var reader = AMF3Reader(bytes)
        var values: [AMF0Value] = []
        while !reader.atEnd { values.append(try reader.value()) }
        return values
    }

    mutating func value(depth: Int) throws(AudioError) -> AMF0Value {
        guard depth < AMF0.maximumDepth else { throw cursor.fail("values nested more than \(AMF0.maximumDepth) deep") }
        try references.tally(1, cursor)
        let at = cursor.offset
        let byte = try cursor.byte()
        guard let marker = Marker(rawValue: byte) else {
            throw AudioError(.corruptFile, "AMF3: unknown type marker \(hexByte(Int(byte))) at byte \(at)")
        }
        switch marker {
        case .undefined: return .undefined
        case .null: return .null
        case .false: return .boolean(false)
        case .true: return .boolean(true)
        case .integer:
            // 29 bits, two's complement.
            let raw = try u29()
            return .number(Double(raw & 0x1000_0000 != 0 ? Int32(raw) - 0x2000_0000 : Int32(raw)))
        case .double: return .number(try cursor.double())
        case .string: return .string(try string())
        case .xmlDocument, .xml:
            let header = try u29()
            if header & 1 == 0 { return try references.reference(Int(header >> 1), depth: depth, cursor) }
            let text = try cursor.utf8(length: Int(header >> 1))
            try references.tally(string: text, cursor)
            references.keep(.string(text), weight: 1 + text.utf8.count / 16)
            return .string(text)
        case .date:
            let header = try u29()
            if header & 1 == 0 { return try references.reference(Int(header >> 1), depth: depth, cursor) }
            let date = AMF0Value.date(milliseconds: try cursor.double(), timeZone: 0)
            references.keep(date, weight: 1)
            return date
        case .array: return try array(depth: depth)
        case .object: return try object(depth: depth)
        case .byteArray:
            let header = try u29()
            if header & 1 == 0 { return try references.reference(Int(header >> 1), depth: depth, cursor) }
            let length = Int(header >> 1)
            let array = AMF0Value.strictArray(try cursor.take(length).map { .number(Double($0)) })
            try references.tally(length, cursor)
            references.keep(array, weight: 1 + length)
            return array
        case .vectorInt, .vectorUInt, .vectorDouble:
            let header = try u29()
            if header & 1 == 0 { return try references.reference(Int(header >> 1), depth: depth, cursor) }
            let count = Int(header >> 1)
            _ = try cursor.byte()  // fixed length or not: nothing to keep
            let size = marker == .vectorDouble ? 8 : 4
            guard count <= (cursor.remaining) / size else {
                throw cursor.fail("a vector of \(count) \(size)-byte elements in \(cursor.remaining) bytes")
            }
            var values: [AMF0Value] = []
            values.reserveCapacity(count)
            for _ in 0..<count {
                switch marker {
                case .vectorInt: values.append(.number(Double(Int32(bitPattern: try cursor.uint32()))))
                case .vectorUInt: values.append(.number(Double(try cursor.uint32())))
                default: values.append(.number(try cursor.double()))
                }
            }
            try references.tally(count, cursor)
            references.keep(.strictArray(values), weight: 1 + count)
            return .strictArray(values)
        case .vectorObject:
            let header = try u29()
            if header & 1 == 0 { return try references.reference(Int(header >> 1), depth: depth, cursor) }
            let count = Int(header >> 1)
            _ = try cursor.byte()
            _ = try string()  // the element type's name
            try checkCount(count, "a vector of objects")
            let slot = references.reserve()
            var values: [AMF0Value] = []
            for _ in 0..<count { values.append(try value(depth: depth + 1)) }
            return references.fill(slot, .strictArray(values))
        case .dictionary:
            let header = try u29()
            if header & 1 == 0 { return try references.reference(Int(header >> 1), depth: depth, cursor) }
            let count = Int(header >> 1)
            _ = try cursor.byte()  // weak keys or not
            try checkCount(count, "a dictionary")
            let slot = references.reserve()
            var properties: [AMF0Property] = []
            for _ in 0..<count {
                let key = try value(depth: depth + 1)
                properties.append(AMF0Property(Self.text(of: key), try value(depth: depth + 1)))
            }
            return references.fill(slot, .ecmaArray(properties))
        }
    }

    private mutating func array(depth: Int) throws(AudioError) -> AMF0Value {
        let header = try u29()
        if header & 1 == 0 { return try references.reference(Int(header >> 1), depth: depth, cursor) }
        let denseCount = Int(header >> 1)
        try checkCount(denseCount, "an array")
        let slot = references.reserve()
        var named: [AMF0Property] = []
        while true {
            let key = try string()
            if key.isEmpty { break }
            named.append(AMF0Property(key, try value(depth: depth + 1)))
        }
        var dense: [AMF0Value] = []
        dense.reserveCapacity(denseCount)
        for _ in 0..<denseCount { dense.append(try value(depth: depth + 1)) }
        let result: AMF0Value =
            named.isEmpty
            ? .strictArray(dense) : .ecmaArray(named + dense.enumerated().map { AMF0Property(String($0.offset), $0.element) })
        return references.fill(slot, result)
    }

    private mutating func object(depth: Int) throws(AudioError) -> AMF0Value {
        let at = cursor.offset - 1
        let header = try u29()
        if header & 1 == 0 { return try references.reference(Int(header >> 1), depth: depth, cursor) }
        let shape: Traits
        if header & 2 == 0 {
            let index = Int(header >> 2)
            guard index < traits.count else { throw cursor.fail("a reference to traits \(index) of \(traits.count)") }
            shape = traits[index]
        } else {
            let externalizable = header & 4 != 0
            let dynamic = header & 8 != 0
            let memberCount = Int(header >> 4)
            let className = try string()
            try checkCount(memberCount, "an object's member names")
            var members: [String] = []
            for _ in 0..<memberCount { members.append(try string()) }
            shape = Traits(externalizable: externalizable, dynamic: dynamic, className: className, members: members)
            traits.append(shape)
        }
        if shape.externalizable {
            throw AudioError(
                .corruptFile,
                "AMF3: the object at byte \(at) is externalizable (class '\(shape.className)'): only its class knows how to read it")
        }
        let slot = references.reserve()
        var properties: [AMF0Property] = []
        for name in shape.members { properties.append(AMF0Property(name, try value(depth: depth + 1))) }
        if shape.dynamic {
            while true {
                let key = try string()
                if key.isEmpty { break }
                properties.append(AMF0Property(key, try value(depth: depth + 1)))
            }
        }
        return references.fill(slot, .object(properties))
    }

    private func checkCount(_ count: Int, _ what: String) throws(AudioError) {
        // Each element takes at least one byte.
        guard count <= cursor.remaining else { throw cursor.fail("\(what) of \(count) elements in \(cursor.remaining) bytes") }
    }

    /// A dictionary key as text.
    static func text(of key: AMF0Value) -> String {
        switch key {
        case .string(let s): s
        case .number(let n): n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
        case .boolean(let b): String(b)
        case .null: "null"
        case .undefined: "undefined"
        default: "object"
        }
    }

    /// A string value or a reference to one; the empty string is never kept for reference.
    private mutating func string() throws(AudioError) -> String {
        let header = try u29()
        if header & 1 == 0 {
            let index = Int(header >> 1)
            guard index < strings.count else { throw cursor.fail("a reference to string \(index) of \(strings.count)") }
            try references.tally(string: strings[index], cursor)
            return strings[index]
        }
        let s = try cursor.utf8(length: Int(header >> 1))
        try references.tally(string: s, cursor)
        if !s.isEmpty { strings.append(s) }
        return s
    }

    /// A variable-length unsigned 29-bit integer: up to three bytes of 7 bits (high bit: more follows), then a
    /// fourth of 8.
    private mutating func u29() throws(AudioError) -> UInt32 {
        var result: UInt32 = 0
        for i in 0..<4 {
            let b = try cursor.byte()
            if i == 3 { return result << 8 | UInt32(b) }
            result = result << 7 | UInt32(b & 0x7F)
            if b & 0x80 == 0 { return result }
        }
        return result
    }
}
