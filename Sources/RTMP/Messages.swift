import AudioCore
import MediaContainers

/// Protocol control messages (types 1–6) and User Control events: building and reading their payloads.
public enum ProtocolControl {
    /// User Control event types.
    public enum UserControlEvent: UInt16, Sendable {
        case streamBegin = 0, streamEOF = 1, streamDry = 2, setBufferLength = 3, streamIsRecorded = 4
        case pingRequest = 6, pingResponse = 7
    }

    public static func setChunkSize(_ size: Int) -> RTMPMessage {
        RTMPMessage(type: .setChunkSize, payload: uint32(UInt32(size)))
    }

    public static func acknowledgement(sequenceNumber: UInt32) -> RTMPMessage {
        RTMPMessage(type: .acknowledgement, payload: uint32(sequenceNumber))
    }

    public static func windowAcknowledgementSize(_ size: UInt32) -> RTMPMessage {
        RTMPMessage(type: .windowAcknowledgementSize, payload: uint32(size))
    }

    /// A User Control event with a 4-byte value (a stream id, or a ping's timestamp).
    public static func userControl(_ event: UserControlEvent, _ value: UInt32) -> RTMPMessage {
        RTMPMessage(type: .userControl, payload: [UInt8(event.rawValue >> 8), UInt8(event.rawValue & 0xFF)] + uint32(value))
    }

    /// The event and its first 4-byte value, from a User Control payload.
    /// - Throws: ``AudioError`` `.protocolError` when shorter than 6 bytes.
    public static func parseUserControl(_ payload: [UInt8]) throws(AudioError) -> (event: UInt16, value: UInt32) {
        guard payload.count >= 6 else { throw ChunkStreamDecoder.error("a User Control message shorter than 6 bytes") }
        return (UInt16(payload[0]) << 8 | UInt16(payload[1]), readUInt32(payload, 2))
    }

    /// The 4-byte number a Set Chunk Size, Acknowledgement, Window Acknowledgement Size or Set Peer Bandwidth
    /// message starts with.
    /// - Throws: ``AudioError`` `.protocolError` when shorter than 4 bytes.
    public static func parseUInt32(_ message: RTMPMessage) throws(AudioError) -> UInt32 {
        guard message.payload.count >= 4 else {
            throw ChunkStreamDecoder.error("a \(message.type) message shorter than 4 bytes")
        }
        return readUInt32(message.payload, 0)
    }

    static func uint32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
    static func appendUInt32(_ v: UInt32, into out: inout [UInt8]) { out += uint32(v) }
    static func readUInt32(_ b: [UInt8], _ i: Int) -> UInt32 {
        UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3])
    }
}

/// An AMF0 command message: name, transaction id, command object, arguments.
public struct RTMPCommand: Hashable, Sendable {
    public var name: String
    public var transactionID: Double
    public var object: AMF0Value
    public var arguments: [AMF0Value]

    public init(_ name: String, transactionID: Double, object: AMF0Value = .null, arguments: [AMF0Value] = []) {
        self.name = name
        self.transactionID = transactionID
        self.object = object
        self.arguments = arguments
    }

    /// Reads a command from a type-20 message's payload.
    /// - Throws: ``AudioError`` `.protocolError` when it is not AMF0 of the command shape.
    public init(payload: [UInt8]) throws(AudioError) {
        let values: [AMF0Value]
        do { values = try AMF0.decodeAll(payload) } catch {
            throw AudioError(.protocolError, "RTMP protocol error: a command that is not valid AMF0 (\(error.message))")
        }
        guard values.count >= 2, let name = values[0].stringValue, let id = values[1].numberValue else {
            throw AudioError(.protocolError, "RTMP protocol error: a command without a name and a transaction id")
        }
        self.name = name
        transactionID = id
        object = values.count > 2 ? values[2] : .null
        arguments = Array(values.dropFirst(3))
    }

    public func message(streamID: UInt32 = 0) -> RTMPMessage {
        RTMPMessage(
            type: .commandAMF0, streamID: streamID,
            payload: AMF0.encode([.string(name), .number(transactionID), object] + arguments))
    }

    /// The info object of an onStatus, `_result` or `_error` (the first object among the arguments).
    public var info: AMF0Value? {
        arguments.first(where: { if case .object = $0 { true } else if case .ecmaArray = $0 { true } else { false } })
    }

    /// "description (code)" from the info object, for error messages.
    public var statusText: String {
        let code = info?["code"]?.stringValue
        let description = info?["description"]?.stringValue
        switch (description, code) {
        case (let d?, let c?) where !d.isEmpty: return "\(d) (\(c))"
        case (_, let c?): return c
        case (let d?, nil): return d
        default: return "no description"
        }
    }
}

/// The simple RTMP handshake (RTMP §5.2): C0+C1 out, S0+S1+S2 in (checked), C2 out.
public struct RTMPHandshake: Sendable {
    public static let version: UInt8 = 3
    public static let packetSize = 1536
    /// C0 and C1: version 3, a 4-byte time, 4 zero bytes (so the server answers with the simple handshake), and
    /// 1528 random bytes.
    public let c0c1: [UInt8]

    public init(time: UInt32 = 0) {
        var bytes = [Self.version] + ProtocolControl.uint32(time) + [0, 0, 0, 0]
        var generator = SystemRandomNumberGenerator()
        bytes.reserveCapacity(1 + Self.packetSize)
        while bytes.count < 1 + Self.packetSize {
            let r = generator.next()
            for shift in stride(from: 0, to: 64, by: 8) where bytes.count < 1 + Self.packetSize {
                bytes.append(UInt8(truncatingIfNeeded: r >> UInt64(shift)))
            }
        }
        c0c1 = bytes
    }

    /// The bytes S0+S1+S2 take.
    public static let responseSize = 1 + 2 * packetSize

    /// Checks the server's S0 (version 3), S1 and S2 (S2 echoes C1's random bytes) and returns C2 (S1 echoed).
    /// - Parameter response: at least ``responseSize`` bytes; the rest is left to the caller.
    /// - Throws: ``AudioError`` `.protocolError` naming what the server sent instead.
    public func validate(_ response: ArraySlice<UInt8>) throws(AudioError) -> [UInt8] {
        precondition(response.count >= Self.responseSize)
        let s0 = response[response.startIndex]
        guard s0 == Self.version else {
            let hint: String =
                switch s0 {
                case 0x16: "it answered with TLS: use rtmps://"
                case UInt8(ascii: "H"): "it answered like an HTTP server: check the host and port"
                default: "it asked for RTMP version \(s0), not 3"
                }
            throw AudioError(.protocolError, "the RTMP handshake failed: \(hint)")
        }
        let s1 = response[(response.startIndex + 1)..<(response.startIndex + 1 + Self.packetSize)]
        let s2 = response[(response.startIndex + 1 + Self.packetSize)..<(response.startIndex + Self.responseSize)]
        guard s2.dropFirst(8).elementsEqual(c0c1[9...]) else {
            throw AudioError(.protocolError, "the RTMP handshake failed: the server's S2 does not echo our C1")
        }
        return Array(s1)
    }
}
