/// The error every LiveAudio control-plane call throws: a stable code and a message a user can act on.
///
/// Codes are four-character codes, like Core Audio's `OSStatus` values, so that logs stay greppable across
/// versions; ``FourCharCode/describe(_:)`` prints them the way iOS code's `CheckError` helpers do.
public struct AudioError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A stable error code. Its raw value never changes between releases.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }

        /// Creates a code from four ASCII characters, e.g. `"fmt?"`.
        public init(fourCC: StaticString) {
            precondition(fourCC.utf8CodeUnitCount == 4, "a four-character code has four characters")
            var value: UInt32 = 0
            fourCC.withUTF8Buffer { for byte in $0 { value = value << 8 | UInt32(byte) } }
            self.rawValue = Int32(bitPattern: value)
        }

        public var description: String { FourCharCode.describe(rawValue) }

        /// A stream format value is invalid (a field out of range, byte sizes that do not match).
        public static let invalidFormat = Code(fourCC: "fmt?")
        /// Two formats that must agree do not (a connection, a buffer handed to a converter).
        public static let formatMismatch = Code(fourCC: "fmt!")
        /// A parameter identifier is unknown or its value is out of range.
        public static let invalidParameter = Code(fourCC: "prm?")
        /// A property is unknown, read-only, or given a value of the wrong kind.
        public static let invalidProperty = Code(fourCC: "prp?")
        /// A bus index does not exist on that unit.
        public static let invalidBus = Code(fourCC: "bus?")
        /// A node is not in the graph, or is already in it.
        public static let invalidNode = Code(fourCC: "nod?")
        /// A connection would close a cycle.
        public static let cycle = Code(fourCC: "cyc!")
        /// A call that the object's lifecycle state does not allow (start before initialize, …).
        public static let invalidState = Code(fourCC: "stt?")
        /// More frames were asked for than the maximum the graph was prepared for.
        public static let tooManyFrames = Code(fourCC: "frm!")
        /// A file could not be opened, read or written.
        public static let fileIO = Code(fourCC: "fil!")
        /// A file's contents are not what its header says, or are not a supported kind of file.
        public static let unsupportedFile = Code(fourCC: "typ?")
        /// A file is damaged: truncated, inconsistent chunk sizes.
        public static let corruptFile = Code(fourCC: "dta!")
        /// A graph description (JSON) is malformed or names something that does not exist.
        public static let invalidGraphDescription = Code(fourCC: "gph?")
        /// Sample rates that must agree do not, or a rate is not supported.
        public static let unsupportedSampleRate = Code(fourCC: "rat?")
        /// The system refused a resource: a thread, memory for a buffer.
        public static let resourceUnavailable = Code(fourCC: "res!")
        /// A song chart or lyrics file is malformed (UltraStar TXT, LRC): the message names the file, line and field.
        public static let invalidChart = Code(fourCC: "crt?")
        /// Something another process holds: a song library's database in use by another `liveaudio`.
        public static let busy = Code(fourCC: "bsy!")
        /// A database could not be opened, read or written (the song library's SQLite file): the message says which
        /// and what SQLite said.
        public static let database = Code(fourCC: "sql!")
    }

    /// What went wrong, as a stable code to match on (``AudioError/Code/invalidFormat``, …).
    public let code: Code
    /// What went wrong in words, naming the value or field at fault: for logs and for the user.
    public let message: String

    /// Creates an error from a code and a message.
    /// - Parameters:
    ///   - code: the stable code, e.g. ``AudioError/Code/invalidFormat``.
    ///   - message: a sentence a user can act on, naming the offending value or field.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(message) [\(code)]" }
}

/// Formatting of `OSStatus`-style codes.
public enum FourCharCode {
    /// Shows `code` as a quoted four-character code when all four bytes are printable ASCII, and as a decimal
    /// number otherwise: `'fmt?'`, but `-10868`.
    public static func describe(_ code: Int32) -> String {
        let value = UInt32(bitPattern: code)
        let bytes = [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
        if bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) {
            return "'" + String(decoding: bytes, as: UTF8.self) + "'"
        }
        return String(code)
    }
}
