import AudioCore

/// Bytes read front to back by the AMF readers: every read checks what is left, and a failure names the format and
/// the offset.
struct AMFCursor {
    let bytes: [UInt8]
    var offset: Int
    /// "AMF0" or "AMF3", for messages.
    let format: String

    var remaining: Int { bytes.count - offset }

    func fail(_ what: String) -> AudioError { AudioError(.corruptFile, "\(format): \(what) at byte \(offset)") }

    mutating func take(_ n: Int) throws(AudioError) -> ArraySlice<UInt8> {
        guard n <= remaining else { throw fail("truncated: \(n) byte(s) needed, \(remaining) left") }
        defer { offset += n }
        return bytes[offset..<offset + n]
    }

    mutating func byte() throws(AudioError) -> UInt8 {
        let b = try take(1)
        return b[b.startIndex]
    }

    mutating func uint16() throws(AudioError) -> UInt16 {
        let b = try take(2)
        return UInt16(b[b.startIndex]) << 8 | UInt16(b[b.startIndex + 1])
    }

    mutating func uint32() throws(AudioError) -> UInt32 {
        try take(4).reduce(0) { $0 << 8 | UInt32($1) }
    }

    mutating func double() throws(AudioError) -> Double {
        Double(bitPattern: try take(8).reduce(0) { $0 << 8 | UInt64($1) })
    }

    mutating func utf8(length: Int) throws(AudioError) -> String {
        let at = offset
        let b = try take(length)
        guard let s = String(validating: b, as: UTF8.self) else {
            throw AudioError(.corruptFile, "\(format): a string at byte \(at) is not valid UTF-8")
        }
        return s
    }
}

/// The complex values an AMF reader has read, in the order they began — what references point into — and the
/// count of values read, a reference counting as many as it stands for. Without that bound, a few hundred bytes of
/// arrays that each refer twice to the one before stand for billions of values, which any walk over the result
/// (comparing, printing) would take for ever to visit.
struct AMFReferenceTable {
    private var values: [AMF0Value] = []
    /// How many values each entry stands for, counting itself; while an entry is still being read, −1 − the
    /// count when it began.
    private var weights: [Int] = []
    private(set) var expanded: Int

    /// The most values one reader expands to, references included.
    static let maximumExpandedValues = 1 << 20

    init(expanded: Int = 0) { self.expanded = expanded }

    mutating func tally(_ n: Int, _ cursor: AMFCursor) throws(AudioError) {
        expanded += n
        guard expanded <= Self.maximumExpandedValues else {
            throw cursor.fail("references that expand to more than \(Self.maximumExpandedValues) values")
        }
    }

    /// A complex value takes its place when it begins (so that its members may refer to it); until it ends, a
    /// reference to it reads as null and stands for one value.
    mutating func reserve() -> Int {
        values.append(.null)
        weights.append(-1 - expanded)
        return values.count - 1
    }

    /// The value that began at `slot`, now whole. Its weight counts its own marker, tallied before it began.
    mutating func fill(_ slot: Int, _ value: AMF0Value) -> AMF0Value {
        values[slot] = value
        weights[slot] = expanded - (-1 - weights[slot]) + 1
        return value
    }

    /// A value read whole at once (a date, a string-like or a flat array).
    mutating func keep(_ value: AMF0Value, weight: Int) {
        values.append(value)
        weights.append(weight)
    }

    /// The value `index` refers to, at `depth`: it counts as deep as it is nested, like a value read in place (a
    /// reference let an array 40 deep hold one 40 deep, 80 levels, which its writer wrote and no reader read back,
    /// and chains of them nested thousands deep — found by the AMF fuzz targets' round trips).
    mutating func reference(_ index: Int, depth: Int, _ cursor: AMFCursor) throws(AudioError) -> AMF0Value {
        guard index < values.count else { throw cursor.fail("a reference to value \(index) of \(values.count)") }
        // The reference's own marker is tallied already.
        try tally(max(0, weights[index] - 1), cursor)
        let value = values[index]
        guard depth + Self.height(value, within: AMF0.maximumDepth - depth) < AMF0.maximumDepth else {
            throw cursor.fail("values nested more than \(AMF0.maximumDepth) deep (through a reference)")
        }
        return value
    }

    /// Levels of nesting below `value` (0 for a scalar or an empty container), counted no further than `limit` + 1.
    /// Visits no more values than the reference tallied.
    static func height(_ value: AMF0Value, within limit: Int) -> Int {
        guard limit >= 0 else { return 1 }
        var deepest = 0
        func visit(_ child: AMF0Value) -> Bool {
            deepest = max(deepest, 1 + height(child, within: limit - 1))
            return deepest > limit
        }
        switch value {
        case .object(let properties), .ecmaArray(let properties):
            for p in properties where visit(p.value) { break }
        case .strictArray(let values):
            for v in values where visit(v) { break }
        default: break
        }
        return deepest
    }

    /// Tallies a string by its length, 1 for every 16 bytes: a string read once and referred to many times must not
    /// expand to gigabytes while counting as one value.
    mutating func tally(string: String, _ cursor: AMFCursor) throws(AudioError) {
        try tally(string.utf8.count / 16, cursor)
    }
}
