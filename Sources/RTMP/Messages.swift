import AudioCore
import MediaContainers

/// Protocol control messages (types 1–6) and User Control events: building and reading their payloads.
public enum ProtocolControl {
    /// User Control event types.
    public enum UserControlEvent: UInt16, Sendable {
        /// Stream Begin (0), Stream EOF (1), Stream Dry (2), Set Buffer Length (3) and Stream Is Recorded (4):
        /// events about a message stream, whose first 4-byte value is the stream id (Set Buffer Length adds a
        /// buffer length in milliseconds). The publisher reads them and acts on none.
        case streamBegin = 0, streamEOF = 1, streamDry = 2, setBufferLength = 3, streamIsRecorded = 4
        /// Ping Request (6) and Ping Response (7), whose 4-byte value is a timestamp: the publisher answers each
        /// Ping Request with a Ping Response carrying the same value.
        case pingRequest = 6, pingResponse = 7
    }

    /// A Set Chunk Size message announcing `size` bytes, clamped to the spec's range, 1 … 0x7FFFFFFF. It only builds
    /// the message: to send it and switch an encoder to the new size, use
    /// ``ChunkStreamEncoder/setChunkSizeMessage(_:)``.
    public static func setChunkSize(_ size: Int) -> RTMPMessage {
        RTMPMessage(type: .setChunkSize, payload: uint32(UInt32(min(max(size, 1), 0x7FFF_FFFF))))
    }

    /// An Acknowledgement message carrying `sequenceNumber`: the bytes received so far (modulo 2³²).
    public static func acknowledgement(sequenceNumber: UInt32) -> RTMPMessage {
        RTMPMessage(type: .acknowledgement, payload: uint32(sequenceNumber))
    }

    /// A Window Acknowledgement Size message: the peer is to acknowledge each time `size` more bytes have come in.
    public static func windowAcknowledgementSize(_ size: UInt32) -> RTMPMessage {
        RTMPMessage(type: .windowAcknowledgementSize, payload: uint32(size))
    }

    /// A User Control event with a 4-byte value (a stream id, or a ping's timestamp).
    public static func userControl(_ event: UserControlEvent, _ value: UInt32) -> RTMPMessage {
        RTMPMessage(type: .userControl, payload: [UInt8(event.rawValue >> 8), UInt8(event.rawValue & 0xFF)] + uint32(value))
    }

    /// The event and its first 4-byte value, from a User Control payload.
    /// - Throws: ``/AudioCore/AudioError`` `.protocolError` when shorter than 6 bytes.
    public static func parseUserControl(_ payload: [UInt8]) throws(AudioError) -> (event: UInt16, value: UInt32) {
        guard payload.count >= 6 else { throw ChunkStreamDecoder.error("a User Control message shorter than 6 bytes") }
        return (UInt16(payload[0]) << 8 | UInt16(payload[1]), readUInt32(payload, 2))
    }

    /// The 4-byte number a Set Chunk Size, Acknowledgement, Window Acknowledgement Size or Set Peer Bandwidth
    /// message starts with.
    /// - Throws: ``/AudioCore/AudioError`` `.protocolError` when shorter than 4 bytes.
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
    /// The command's name (`connect`, `createStream`, `publish`, `_result`, `onStatus`, …).
    public var name: String
    /// The number that pairs a command with its answer: a `_result` or `_error` repeats the one it answers.
    public var transactionID: Double
    /// The command object: `connect`'s properties, a `_result`'s server properties; null for most commands.
    public var object: AMF0Value
    /// The values after the command object (a stream key, a stream id, an onStatus info object, …).
    public var arguments: [AMF0Value]

    /// A command to send.
    /// - Parameters:
    ///   - name: The command's name.
    ///   - transactionID: The number its answer will repeat.
    ///   - object: The command object; null by default.
    ///   - arguments: The values after the command object; none by default.
    public init(_ name: String, transactionID: Double, object: AMF0Value = .null, arguments: [AMF0Value] = []) {
        self.name = name
        self.transactionID = transactionID
        self.object = object
        self.arguments = arguments
    }

    /// Reads a command from a type-20 message's payload.
    /// - Throws: ``/AudioCore/AudioError`` `.protocolError` when it is not AMF0 of the command shape.
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

    /// Reads the command a command message carries — type 20 (AMF0) or type 17 (AMF3: a format byte, then AMF0
    /// values that switch to AMF3 where marked, or AMF3 values throughout) — the way established clients read what
    /// servers send: a missing transaction id reads as 0, a missing command object as null, missing or extra
    /// arguments as they are. Servers differ in exactly these ways (FFmpeg's answers `FCPublish` with an
    /// `onFCPublish` that has a name and nothing else).
    ///
    /// - Returns: nil for a message that is not a command, or whose first value is not a name; and for a command
    ///   whose AMF is damaged, when it is not a reply (see below): like a command this client does not know, it is
    ///   nothing to act on.
    /// - Throws: ``/AudioCore/AudioError`` `.protocolError` when a reply (`_result`, `_error`, `onStatus`) is damaged
    ///   (truncated, nested too deep, an unknown marker): acting on part of a reply would be guessing.
    public init?(message: RTMPMessage) throws(AudioError) {
        guard message.type == .commandAMF0 || message.type == .commandAMF3 else { return nil }
        let (values, damage) = Self.values(in: message)
        guard let name = values.first?.stringValue else { return nil }
        if let damage {
            guard !Self.replies.contains(name) else {
                throw AudioError(.protocolError, "RTMP protocol error: a '\(name)' whose AMF is damaged (\(damage.message))")
            }
            return nil
        }
        self.name = name
        transactionID = values.count > 1 ? values[1].numberValue ?? 0 : 0
        object = values.count > 2 ? values[2] : .null
        arguments = Array(values.dropFirst(3))
    }

    /// The commands a server sends in answer to this client's, which it acts on.
    static let replies: Set<String> = ["_result", "_error", "onStatus"]

    /// The AMF values of a command or data message (types 20 and 18: AMF0; 17 and 15: AMF3's format byte, then
    /// AMF0 with switches to AMF3, or AMF3 throughout), read up to the first damaged one, and the damage.
    public static func values(in message: RTMPMessage) -> (values: [AMF0Value], damage: AudioError?) {
        var payload = message.payload[...]
        let amf3 = message.type == .commandAMF3 || message.type == .dataAMF3
        if amf3, payload.first == 0 { payload = payload.dropFirst() }
        var values: [AMF0Value] = []
        // AMF0 never starts a message with undefined (0x06), which is AMF3's string marker.
        if amf3, payload.first == 0x06 {
            var reader = AMF3Reader(Array(payload))
            while !reader.atEnd {
                do { values.append(try reader.value()) } catch { return (values, error) }
            }
        } else {
            var reader = AMF0Reader(Array(payload))
            while !reader.atEnd {
                do { values.append(try reader.value()) } catch { return (values, error) }
            }
        }
        return (values, nil)
    }

    /// The command as an AMF0 command message (type 20) on message stream `streamID`: 0 (the default) for the
    /// connection's commands, the stream's id for `publish`.
    public func message(streamID: UInt32 = 0) -> RTMPMessage {
        RTMPMessage(
            type: .commandAMF0, streamID: streamID,
            payload: AMF0.encode([.string(name), .number(transactionID), object] + arguments))
    }

    /// The info object of an onStatus, `_result` or `_error`: the first object among the arguments or, from a
    /// server that sends it where the command object goes (`onStatus(0, {level, code, …})`), the command object
    /// (never a `_result`'s, which holds the server's properties).
    public var info: AMF0Value? {
        func isObject(_ v: AMF0Value) -> Bool {
            if case .object = v { true } else if case .ecmaArray = v { true } else { false }
        }
        if let found = arguments.first(where: isObject) { return found }
        // A `_result`'s command object is the server's properties, never the status.
        return name != "_result" && isObject(object) ? object : nil
    }

    /// The number a `_result` answers with (createStream's stream id): the first number among the arguments or,
    /// from a server that leaves out the null command object, the command object.
    public var resultNumber: Double? {
        arguments.first(where: { $0.numberValue != nil })?.numberValue ?? object.numberValue
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
    /// The RTMP version C0 asks for and S0 must answer with: 3.
    public static let version: UInt8 = 3
    /// The size of C1, C2, S1 and S2: 1536 bytes.
    public static let packetSize = 1536
    /// C0 and C1: version 3, a 4-byte time, 4 zero bytes (so the server answers with the simple handshake), and
    /// 1528 random bytes.
    public let c0c1: [UInt8]

    /// A handshake with a fresh C0+C1, stamped `time` (milliseconds, the epoch of this side's timestamps; 0 by
    /// default).
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

    /// The bytes S0+S1 take: 1537.
    public static let s0s1Size = 1 + packetSize
    /// The bytes S2 takes: 1536.
    public static let s2Size = packetSize
    /// The bytes S0+S1+S2 take.
    public static let responseSize = 1 + 2 * packetSize

    /// Checks the server's S0 (version 3) and returns C2 (S1 echoed). C2 goes out as soon as S1 is in, before
    /// S2 is read, as librtmp does: a server may send S2 only once it has C2 (the spec allows either order), and
    /// one that sends S0+S1+S2 at once is served just as well.
    /// - Parameter s0s1: at least ``s0s1Size`` bytes; the rest is left to the caller.
    /// - Throws: ``/AudioCore/AudioError`` `.protocolError` naming what answered instead.
    public func c2(answering s0s1: ArraySlice<UInt8>) throws(AudioError) -> [UInt8] {
        precondition(s0s1.count >= Self.s0s1Size)
        let s0 = s0s1[s0s1.startIndex]
        guard s0 == Self.version else {
            let hint: String =
                switch s0 {
                case 0x16: "it answered with TLS: use rtmps://"
                case UInt8(ascii: "H"): "it answered like an HTTP server: check the host and port"
                default: "it asked for RTMP version \(s0), not 3"
                }
            throw AudioError(.protocolError, "the RTMP handshake failed: \(hint)")
        }
        return Array(s0s1[(s0s1.startIndex + 1)..<(s0s1.startIndex + Self.s0s1Size)])
    }

    /// Whether S2 echoes C1's random bytes (RTMP §5.2.4). Servers in the field do not always (some send random
    /// bytes of their own, some the digest of the complex handshake), and established clients (FFmpeg, librtmp)
    /// go on regardless; so does the publisher, noting it at debug level.
    /// - Parameter s2: at least ``s2Size`` bytes.
    public func echoes(s2: ArraySlice<UInt8>) -> Bool {
        precondition(s2.count >= Self.s2Size)
        return s2.dropFirst(8).prefix(Self.packetSize - 8).elementsEqual(c0c1[9...])
    }
}
