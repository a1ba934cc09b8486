import AudioCore

/// RTMP message types (the spec's message type IDs).
public struct RTMPMessageType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Set Chunk Size (1): a 4-byte number, the largest chunk the sender uses from now on.
    public static let setChunkSize = RTMPMessageType(rawValue: 1)
    /// Abort (2): a 4-byte chunk stream id whose partly received message is to be discarded.
    public static let abort = RTMPMessageType(rawValue: 2)
    /// Acknowledgement (3): a 4-byte sequence number, the bytes received so far.
    public static let acknowledgement = RTMPMessageType(rawValue: 3)
    /// User Control (4): a 2-byte event type (``ProtocolControl/UserControlEvent``) and its data.
    public static let userControl = RTMPMessageType(rawValue: 4)
    /// Window Acknowledgement Size (5): a 4-byte number; whoever receives it sends an Acknowledgement each time
    /// that many more bytes have come in.
    public static let windowAcknowledgementSize = RTMPMessageType(rawValue: 5)
    /// Set Peer Bandwidth (6): a 4-byte window size and a limit type; the publisher answers a new size with a
    /// Window Acknowledgement Size.
    public static let setPeerBandwidth = RTMPMessageType(rawValue: 6)
    /// Audio (8): an FLV audio tag's body (for this publisher, AAC).
    public static let audio = RTMPMessageType(rawValue: 8)
    /// Video (9): an FLV video tag's body; this publisher sends none.
    public static let video = RTMPMessageType(rawValue: 9)
    /// Data in AMF3 (15): a format byte, then AMF values (such as onMetaData).
    public static let dataAMF3 = RTMPMessageType(rawValue: 15)
    /// Command in AMF3 (17): a format byte, then the command's AMF values.
    public static let commandAMF3 = RTMPMessageType(rawValue: 17)
    /// Data in AMF0 (18): what carries `@setDataFrame` and onMetaData.
    public static let dataAMF0 = RTMPMessageType(rawValue: 18)
    /// Command in AMF0 (20): `connect`, `createStream`, `publish`, and the server's `_result`, `_error`, `onStatus`.
    public static let commandAMF0 = RTMPMessageType(rawValue: 20)
    /// Aggregate (22): several messages in one, as FLV tags; this publisher neither sends nor unpacks them.
    public static let aggregate = RTMPMessageType(rawValue: 22)

    /// Protocol control messages (1–6) travel on chunk stream 2 with message stream 0.
    public var isProtocolControl: Bool { (1...6).contains(rawValue) }

    public var description: String {
        let names: [UInt8: String] = [
            1: "Set Chunk Size", 2: "Abort", 3: "Acknowledgement", 4: "User Control", 5: "Window Acknowledgement Size",
            6: "Set Peer Bandwidth", 8: "audio", 9: "video", 15: "data (AMF3)", 17: "command (AMF3)",
            18: "data (AMF0)", 20: "command (AMF0)", 22: "aggregate",
        ]
        return names[rawValue] ?? "type \(rawValue)"
    }
}

/// One RTMP message: what chunk streams carry.
public struct RTMPMessage: Hashable, Sendable {
    /// What the message is (the spec's message type id).
    public var type: RTMPMessageType
    /// The message stream (0 for the connection, the id `createStream` returned for a published stream).
    public var streamID: UInt32
    /// Milliseconds; wraps at 2³².
    public var timestamp: UInt32
    /// The message's body; ``ChunkStreamEncoder`` takes at most 0xFFFFFF bytes (just under 16 MiB).
    public var payload: [UInt8]

    /// A message of `type` on message stream `streamID` (default 0, the connection) stamped `timestamp`
    /// milliseconds (default 0).
    /// - Parameters:
    ///   - type: The message type.
    ///   - streamID: The message stream: 0 for the connection, or the id `createStream` returned.
    ///   - timestamp: Milliseconds; wraps at 2³².
    ///   - payload: The message's body.
    public init(type: RTMPMessageType, streamID: UInt32 = 0, timestamp: UInt32 = 0, payload: [UInt8]) {
        self.type = type
        self.streamID = streamID
        self.timestamp = timestamp
        self.payload = payload
    }
}

/// The RTMP chunk-stream ids this client uses.
public enum ChunkStreamID {
    /// 2: protocol control messages (Set Chunk Size, Acknowledgement, User Control, …), as the spec requires.
    public static let control: UInt32 = 2
    /// 3: command messages (`connect`, `createStream`, `publish`, `FCUnpublish`, …).
    public static let command: UInt32 = 3
    /// 4: audio messages (the AAC sequence header and frames).
    public static let audio: UInt32 = 4
    /// 5: data messages (onMetaData).
    public static let data: UInt32 = 5
    /// The largest id a three-byte basic header can carry.
    public static let maximum: UInt32 = 65_599
}

/// What a chunk header remembers per chunk stream, for compressing (fmt 1–3) the next one.
struct ChunkHeaderState {
    var timestamp: UInt32
    /// The delta the last fmt 1/2 header carried (or, after fmt 0, its timestamp, per the spec).
    var delta: UInt32
    var length: Int
    var type: RTMPMessageType
    var streamID: UInt32
    /// The last fmt 0–2 header carried an extended timestamp, so fmt 3 chunks repeat it.
    var extended: Bool
    /// The last header was fmt 1 or 2, so a fmt 3 header for a new message has an unambiguous delta.
    var deltaFromHeader: Bool
}

/// Splits messages into chunks (RTMP §5.3), choosing the smallest header each chunk stream allows.
///
/// A message's chunks are emitted together; messages on different chunk streams may be written in any order.
/// Timestamps of 0xFFFFFF and above use the extended field, which fmt 3 continuation chunks repeat (as nginx-rtmp
/// and FFmpeg expect).
public struct ChunkStreamEncoder: Sendable {
    /// Outgoing chunk size; change it with ``setChunkSizeMessage(_:)``.
    public private(set) var chunkSize = 128
    private var streams: [UInt32: ChunkHeaderState] = [:]

    /// An encoder with the spec's initial chunk size of 128 bytes and no chunk stream history (the first message
    /// on each chunk stream gets a full fmt 0 header).
    public init() {}

    /// Chunks for a Set Chunk Size message (sent at the current size), after which this encoder uses `size`.
    /// - Precondition: `size` is 1 … 0x7FFFFFFF (the spec's range); RTMP peers commonly accept up to 65536.
    public mutating func setChunkSizeMessage(_ size: Int) -> [UInt8] {
        precondition(size >= 1 && size <= 0x7FFF_FFFF, "chunk size out of range")
        var out: [UInt8] = []
        encode(
            RTMPMessage(type: .setChunkSize, payload: ProtocolControl.uint32(UInt32(size))),
            chunkStream: ChunkStreamID.control, into: &out)
        chunkSize = size
        return out
    }

    /// Appends `message` as chunks of chunk stream `chunkStream` (2 … 65599) to `out`.
    public mutating func encode(_ message: RTMPMessage, chunkStream: UInt32, into out: inout [UInt8]) {
        precondition(chunkStream >= 2 && chunkStream <= ChunkStreamID.maximum, "chunk stream id out of range")
        precondition(message.payload.count <= 0xFF_FFFF, "an RTMP message is at most 16 MiB")
        let length = message.payload.count
        let fmt: UInt8
        var field: UInt32  // the timestamp or delta the header carries
        if let prev = streams[chunkStream], prev.streamID == message.streamID, message.timestamp >= prev.timestamp {
            let delta = message.timestamp &- prev.timestamp
            if length != prev.length || message.type != prev.type {
                fmt = 1
            } else if delta != prev.delta || !prev.deltaFromHeader || prev.extended {
                fmt = 2
            } else {
                fmt = 3
            }
            field = delta
        } else {
            fmt = 0
            field = message.timestamp
        }
        let extended = fmt == 3 ? streams[chunkStream]!.extended : field >= 0xFF_FFFF
        if fmt != 3 {
            streams[chunkStream] = ChunkHeaderState(
                timestamp: message.timestamp, delta: field, length: length, type: message.type,
                streamID: message.streamID, extended: extended, deltaFromHeader: fmt != 0)
        } else {
            streams[chunkStream]!.timestamp = message.timestamp
        }
        if fmt == 3 { field = streams[chunkStream]!.delta }

        // First chunk: the full header for `fmt`.
        Self.appendBasicHeader(fmt: fmt, chunkStream: chunkStream, into: &out)
        if fmt <= 2 {
            Self.appendUInt24(extended ? 0xFF_FFFF : field, into: &out)
            if fmt <= 1 {
                Self.appendUInt24(UInt32(length), into: &out)
                out.append(message.type.rawValue)
                if fmt == 0 {
                    // The message stream id is little-endian.
                    let id = message.streamID
                    out += [UInt8(id & 0xFF), UInt8(id >> 8 & 0xFF), UInt8(id >> 16 & 0xFF), UInt8(id >> 24)]
                }
            }
        }
        if extended { ProtocolControl.appendUInt32(field, into: &out) }
        var offset = 0
        repeat {
            if offset > 0 {
                Self.appendBasicHeader(fmt: 3, chunkStream: chunkStream, into: &out)
                if extended { ProtocolControl.appendUInt32(field, into: &out) }
            }
            let n = min(chunkSize, length - offset)
            out.append(contentsOf: message.payload[offset..<offset + n])
            offset += n
        } while offset < length
    }

    static func appendBasicHeader(fmt: UInt8, chunkStream: UInt32, into out: inout [UInt8]) {
        switch chunkStream {
        case 2...63: out.append(fmt << 6 | UInt8(chunkStream))
        case 64...319: out += [fmt << 6, UInt8(chunkStream - 64)]
        default:
            let id = chunkStream - 64
            out += [fmt << 6 | 1, UInt8(id & 0xFF), UInt8(id >> 8)]
        }
    }

    static func appendUInt24(_ value: UInt32, into out: inout [UInt8]) {
        out += [UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }
}

/// Reassembles messages from a byte stream of chunks, in pieces of any size (RTMP §5.3).
///
/// Chunk streams may interleave; Set Chunk Size and Abort messages take effect as they are decoded, wherever they
/// come (and are still returned). What established clients accept is accepted: a chunk stream may start with a
/// fmt 1 or 2 header, whose missing fields are taken as zero. Malformed input — a fmt 3 header with no earlier
/// header, a chunk size out of range, a
/// message longer than ``maximumMessageLength``, too many chunk streams at once, more than
/// ``maximumPartialBytes`` of unfinished messages — is a typed error, never a crash, so what a hostile peer can
/// make the decoder hold is bounded.
public struct ChunkStreamDecoder: Sendable {
    /// Incoming chunk size (the peer's Set Chunk Size).
    public private(set) var chunkSize = 128
    /// The longest message accepted; longer ones are a protocol error.
    public var maximumMessageLength = 0xFF_FFFF
    /// How many chunk streams may be known at once.
    public var maximumChunkStreams = 256
    /// The most bytes of unfinished messages held across all chunk streams.
    public var maximumPartialBytes = 32 << 20
    /// The largest chunk size a peer may set: a chunk never needs to be longer than the longest message (16 MiB),
    /// and the spec's 2³¹ − 1 only invites a peer to announce what it never sends.
    public static let maximumChunkSize = 0xFF_FFFF
    private var partialBytes = 0
    private var buffer: [UInt8] = []
    private var readIndex = 0
    private var streams: [UInt32: (header: ChunkHeaderState, partial: [UInt8])] = [:]

    /// A decoder with the spec's initial chunk size of 128 bytes, no bytes buffered and the default limits.
    public init() {}

    /// Bytes received and not yet consumed.
    public var bufferedByteCount: Int { buffer.count - readIndex }

    /// Adds received bytes.
    public mutating func append<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        if readIndex > 65_536, readIndex * 2 > buffer.count {
            buffer.removeSubrange(0..<readIndex)
            readIndex = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next complete message, or nil when more bytes are needed.
    /// - Throws: ``/AudioCore/AudioError`` `.protocolError` for malformed chunks; the decoder is unusable afterwards.
    public mutating func nextMessage() throws(AudioError) -> (message: RTMPMessage, chunkStream: UInt32)? {
        while true {
            guard let (message, chunkStream) = try nextChunk() else { return nil }
            guard let message else { continue }
            switch message.type {
            case .setChunkSize:
                guard message.payload.count >= 4 else { throw Self.error("a Set Chunk Size message shorter than 4 bytes") }
                let size = ProtocolControl.readUInt32(message.payload, 0)
                guard size >= 1, size <= Self.maximumChunkSize else {
                    throw Self.error("the peer set a chunk size of \(size), outside 1…\(Self.maximumChunkSize)")
                }
                chunkSize = Int(size)
            case .abort:
                guard message.payload.count >= 4 else { throw Self.error("an Abort message shorter than 4 bytes") }
                let aborted = ProtocolControl.readUInt32(message.payload, 0)
                partialBytes -= streams[aborted]?.partial.count ?? 0
                streams[aborted]?.partial = []
            default: break
            }
            return (message, chunkStream)
        }
    }

    static func error(_ what: String) -> AudioError { AudioError(.protocolError, "RTMP protocol error: \(what)") }

    /// Consumes one whole chunk if it is buffered. Returns nil (consuming nothing) when it is not yet; otherwise
    /// the message it completed, if any, and its chunk stream.
    private mutating func nextChunk() throws(AudioError) -> (RTMPMessage?, UInt32)? {
        var p = readIndex
        let end = buffer.count
        guard p < end else { return nil }
        let first = buffer[p]
        let fmt = first >> 6
        var chunkStream = UInt32(first & 0x3F)
        p += 1
        if chunkStream == 0 {
            guard p + 1 <= end else { return nil }
            chunkStream = UInt32(buffer[p]) + 64
            p += 1
        } else if chunkStream == 1 {
            guard p + 2 <= end else { return nil }
            chunkStream = UInt32(buffer[p]) + UInt32(buffer[p + 1]) << 8 + 64
            p += 2
        }
        let headerSize = [11, 7, 3, 0][Int(fmt)]
        guard p + headerSize <= end else { return nil }
        let known = streams[chunkStream]
        // A first header of fmt 1 or 2 takes what it leaves out as zero, as librtmp does: some servers compress
        // against the last header they sent on any chunk stream (pyrtmp answers connect so). A fmt 3 header has
        // no length to go on.
        if fmt == 3, known == nil {
            throw Self.error("chunk stream \(chunkStream) starts with a fmt 3 header, which needs an earlier one")
        }
        if known == nil, streams.count >= maximumChunkStreams {
            throw Self.error("more than \(maximumChunkStreams) chunk streams at once")
        }
        var header =
            known?.header
            ?? ChunkHeaderState(
                timestamp: 0, delta: 0, length: 0, type: RTMPMessageType(rawValue: 0), streamID: 0, extended: false,
                deltaFromHeader: false)
        // The partial message stays in the dictionary and grows in place: copying it out would make long
        // messages quadratic.
        let received = known?.partial.count ?? 0
        let startsMessage = received == 0
        let lengthInProgress = header.length
        var field: UInt32 = 0
        if fmt <= 2 {
            field = UInt32(buffer[p]) << 16 | UInt32(buffer[p + 1]) << 8 | UInt32(buffer[p + 2])
            if fmt <= 1 {
                header.length = Int(UInt32(buffer[p + 3]) << 16 | UInt32(buffer[p + 4]) << 8 | UInt32(buffer[p + 5]))
                header.type = RTMPMessageType(rawValue: buffer[p + 6])
                if fmt == 0 {
                    header.streamID =
                        UInt32(buffer[p + 7]) | UInt32(buffer[p + 8]) << 8 | UInt32(buffer[p + 9]) << 16
                        | UInt32(buffer[p + 10]) << 24
                }
            }
            if !startsMessage {
                throw Self.error(
                    "chunk stream \(chunkStream) got a fmt \(fmt) header in the middle of a \(lengthInProgress)-byte message")
            }
            header.extended = field == 0xFF_FFFF
        }
        p += headerSize
        if header.extended {
            guard p + 4 <= end else { return nil }
            let value = ProtocolControl.readUInt32(buffer, p)
            if fmt <= 2 { field = value }
            p += 4
        }
        guard header.length <= maximumMessageLength else {
            throw Self.error("a \(header.length)-byte message is longer than the \(maximumMessageLength) bytes allowed")
        }
        let payloadSize = min(chunkSize, header.length - received)
        guard p + payloadSize <= end else { return nil }

        // The whole chunk is here: commit.
        if startsMessage {
            switch fmt {
            case 0:
                header.timestamp = field
                header.delta = field
                header.deltaFromHeader = false
            case 1, 2:
                header.delta = field
                header.timestamp &+= field
                header.deltaFromHeader = true
            default:
                header.timestamp &+= header.delta
            }
        }
        if received + payloadSize < header.length, partialBytes + payloadSize > maximumPartialBytes {
            throw Self.error("more than \(maximumPartialBytes) bytes of unfinished messages")
        }
        if streams[chunkStream] == nil { streams[chunkStream] = (header, []) }
        streams[chunkStream]!.header = header
        streams[chunkStream]!.partial.append(contentsOf: buffer[p..<p + payloadSize])
        partialBytes += payloadSize
        p += payloadSize
        readIndex = p
        guard received + payloadSize == header.length else { return (nil, chunkStream) }
        let payload = streams[chunkStream]!.partial
        partialBytes -= payload.count
        streams[chunkStream]!.partial = []
        return (
            RTMPMessage(type: header.type, streamID: header.streamID, timestamp: header.timestamp, payload: payload),
            chunkStream
        )
    }
}
