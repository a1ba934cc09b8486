import FoundationEssentials

/// A parsed JSON value, keeping booleans, numbers and strings apart so graph files get precise error messages.
public enum JSONValue: Decodable, Hashable, Sendable, CustomStringConvertible {
    /// JSON `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number, as a `Double` (integers too).
    case number(Double)
    /// A string.
    case string(String)
    /// An array, its elements in order.
    case array([JSONValue])
    /// An object, its members by key.
    case object([String: JSONValue])

    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let b = try? c.decode(Bool.self) {
            self = .bool(b)
        } else if let d = try? c.decode(Double.self) {
            self = .number(d)
        } else if let s = try? c.decode(String.self) {
            self = .string(s)
        } else if let a = try? c.decode([JSONValue].self) {
            self = .array(a)
        } else {
            self = .object(try c.decode([String: JSONValue].self))
        }
    }

    public var description: String {
        switch self {
        case .null: "null"
        case .bool(let b): "\(b)"
        case .number(let d): d == d.rounded() && abs(d) < 1e15 ? "\(Int(d))" : "\(d)"
        case .string(let s): "\"\(s)\""
        case .array(let a): "[" + a.map(\.description).joined(separator: ", ") + "]"
        case .object: "{…}"
        }
    }

    var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// Parses `data`, turning syntax errors into ``AudioError`` `.invalidGraphDescription`.
    static func parse(_ data: Data, source: String) throws(AudioError) -> JSONValue {
        do {
            return try JSONDecoder().decode(JSONValue.self, from: data)
        } catch let DecodingError.dataCorrupted(context) {
            // FoundationEssentials' parser gives no underlying error (no line or column) on Linux; take one if given.
            let detail = context.underlyingError.map { "\($0)" } ?? context.debugDescription
            throw AudioError(.invalidGraphDescription, "\(source) is not valid JSON: \(detail)")
        } catch {
            throw AudioError(.invalidGraphDescription, "\(source) is not valid JSON: \(error)")
        }
    }
}
