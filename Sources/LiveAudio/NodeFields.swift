import FoundationEssentials

/// The fields of one node in a graph file, with typed accessors whose errors name the node and the field.
public struct NodeFields {
    /// The node's `id` in the file, unique in the graph.
    public let id: String
    /// The node's `type`: the name its factory is registered under in the ``UnitRegistry``.
    public let type: String
    /// The graph's format: sample rate and default channel count.
    public let format: StreamFormat
    /// Folder that relative paths resolve against (the graph file's).
    public let baseDirectory: String
    let values: [String: JSONValue]
    private(set) var consumed: Set<String> = ["id", "type", "bypass"]

    /// True when the node names a rate of its own ("sampleRate"), which ``format`` then has.
    public let hasOwnRate: Bool

    /// The format of what the file connects to this node's input bus 0, when that node is made first (a graph file
    /// makes a node after the one feeding it): a converter takes its input rate from it.
    public let sourceFormat: StreamFormat?

    init(
        id: String, type: String, values: [String: JSONValue], format: StreamFormat, baseDirectory: String, hasOwnRate: Bool = false,
        sourceFormat: StreamFormat? = nil
    ) {
        self.id = id
        self.type = type
        self.values = values
        self.format = format
        self.baseDirectory = baseDirectory
        self.hasOwnRate = hasOwnRate
        self.sourceFormat = sourceFormat
        if hasOwnRate { consumed.insert("sampleRate") }
    }

    /// An error about field `key` of this node.
    public func error(_ key: String, _ problem: String) -> AudioError {
        AudioError(.invalidGraphDescription, "node '\(id)' (\(type)): field '\(key)' \(problem)")
    }

    /// Whether the node gives field `key` (any value); does not count it as read.
    public func has(_ key: String) -> Bool { values[key] != nil }

    /// A number in `range`, or `defaultValue` when absent (required when `defaultValue` is nil).
    public mutating func number(_ key: String, default defaultValue: Double? = nil, in range: ClosedRange<Double>, unit: String = "")
        throws(AudioError) -> Double
    {
        consumed.insert(key)
        guard let v = values[key] else {
            if let defaultValue { return defaultValue }
            throw error(key, "is required")
        }
        guard case .number(let d) = v else { throw error(key, "must be a number, got \(v.kindName)") }
        guard range.contains(d) else {
            throw error(key, "must be between \(Self.show(range.lowerBound))\(unit) and \(Self.show(range.upperBound))\(unit), got \(Self.show(d))")
        }
        return d
    }

    /// A whole number in `range`.
    public mutating func integer(_ key: String, default defaultValue: Int? = nil, in range: ClosedRange<Int>) throws(AudioError) -> Int {
        let d = try number(key, default: defaultValue.map(Double.init), in: Double(range.lowerBound)...Double(range.upperBound))
        guard d == d.rounded() else { throw error(key, "must be a whole number, got \(d)") }
        return Int(d)
    }

    /// A `true` or `false` field, or `defaultValue` when absent; counts `key` as read.
    /// - Parameters:
    ///   - key: the field's name.
    ///   - defaultValue: the value when the node does not give the field.
    /// - Returns: the field's value.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidGraphDescription` when the field is not a boolean.
    public mutating func bool(_ key: String, default defaultValue: Bool) throws(AudioError) -> Bool {
        consumed.insert(key)
        guard let v = values[key] else { return defaultValue }
        guard case .bool(let b) = v else { throw error(key, "must be true or false, got \(v.kindName)") }
        return b
    }

    /// The required non-empty string in field `key`; counts `key` as read.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidGraphDescription` when the field is absent, not a string or empty.
    public mutating func string(_ key: String) throws(AudioError) -> String {
        consumed.insert(key)
        guard let v = values[key] else { throw error(key, "is required") }
        guard case .string(let s) = v, !s.isEmpty else { throw error(key, "must be a non-empty string, got \(v)") }
        return s
    }

    /// A path, resolved against the graph file's folder when relative.
    public mutating func path(_ key: String) throws(AudioError) -> String {
        let p = try string(key)
        return p.hasPrefix("/") ? p : FilePath.join(baseDirectory, p)
    }

    /// An array of `count` numbers in `range`, or `count` copies of `defaultValue` when absent.
    public mutating func numbers(
        _ key: String, count: Int, default defaultValue: Double, in range: ClosedRange<Double>, each: String = "input"
    ) throws(AudioError) -> [Double]
    {
        consumed.insert(key)
        guard let v = values[key] else { return Array(repeating: defaultValue, count: count) }
        guard case .array(let items) = v else { throw error(key, "must be an array of \(count) numbers, got \(v.kindName)") }
        guard items.count == count else { throw error(key, "must have \(count) entries (one per \(each)), got \(items.count)") }
        var result: [Double] = []
        for (i, item) in items.enumerated() {
            guard case .number(let d) = item, range.contains(d) else {
                throw error(key, "entry \(i) must be a number between \(Self.show(range.lowerBound)) and \(Self.show(range.upperBound)), got \(item)")
            }
            result.append(d)
        }
        return result
    }

    /// The array of objects in `key` (empty when absent), each checked by `body` with a label like `bands[2]`.
    public mutating func objects<T>(_ key: String, maximumCount: Int, _ body: (_ label: String, _ object: [String: JSONValue]) throws(AudioError) -> T)
        throws(AudioError) -> [T]
    {
        consumed.insert(key)
        guard let v = values[key] else { return [] }
        guard case .array(let items) = v else { throw error(key, "must be an array of objects, got \(v.kindName)") }
        guard items.count <= maximumCount else { throw error(key, "holds at most \(maximumCount) entries, got \(items.count)") }
        var result: [T] = []
        for (i, item) in items.enumerated() {
            guard case .object(let o) = item else { throw error("\(key)[\(i)]", "must be an object, got \(item.kindName)") }
            result.append(try body("\(key)[\(i)]", o))
        }
        return result
    }

    /// Counts `key` as read (a factory that reads the node's fields itself, other than through these accessors).
    public mutating func markConsumed(_ key: String) { consumed.insert(key) }

    /// Fields not read by the factory.
    var unconsumed: [String] { values.keys.filter { !consumed.contains($0) }.sorted() }

    static func show(_ d: Double) -> String { d == d.rounded() && abs(d) < 1e15 ? "\(Int(d))" : "\(d)" }
}
