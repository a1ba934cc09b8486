import LiveAudio

/// A phone's microphone over the stage's WebSocket: one binary message a packet of audio, with the time its first
/// frame was captured on the phone's clock.
///
/// The layout (24 bytes of header, little-endian, then the payload):
///
/// | bytes | field |
/// |---|---|
/// | 0–1 | `LA` |
/// | 2 | version, 1 |
/// | 3 | codec: 0 16-bit PCM (interleaved), 1 Opus (one packet, RFC 6716) |
/// | 4–7 | sequence number, one more each packet (wraps) |
/// | 8–15 | capture time of the first frame, microseconds on the phone's clock (signed) |
/// | 16–19 | sample rate in Hz: 8000 … 48000 (Opus: 48000) |
/// | 20 | channels: 1 or 2 |
/// | 21 | flags: bit 0, the first packet after the capture (re)started; the others 0 |
/// | 22–23 | frames in the packet: 1 … 5760 (120 ms at 48 kHz) |
/// | 24… | payload: PCM, exactly frames × channels × 2 bytes; Opus, 1 … 1500 bytes |
///
/// A message is at most ``maximumBytes``. Decoding checks every field and the payload's length against them; what an
/// Opus payload decodes to is checked again by the decoder (its frame count must be the header's).
public struct PhoneAudioPacket: Sendable, Equatable {
    /// How the payload is coded.
    public enum Codec: UInt8, Sendable {
        /// Signed 16-bit little-endian PCM, channels interleaved.
        case pcm16 = 0
        /// One Opus packet (RFC 6716), 48 kHz.
        case opus = 1
    }

    /// How the payload is coded.
    public var codec: Codec
    /// One more each packet (wrapping): a gap in the numbers is a lost packet.
    public var sequence: UInt32
    /// When the packet's first frame was captured, in microseconds on the phone's clock.
    public var captureMicroseconds: Int64
    /// The payload's rate in Hz.
    public var sampleRate: Int
    /// The payload's channels, 1 or 2.
    public var channelCount: Int
    /// The first packet after the phone's capture (re)started: its time starts a new run.
    public var isFirst: Bool
    /// Frames in the packet.
    public var frameCount: Int
    /// The coded audio.
    public var payload: [UInt8]

    /// The header's length in bytes.
    public static let headerBytes = 24
    /// The longest message: the header and 8192 bytes of payload (PCM: 85 ms of 48 kHz mono).
    public static let maximumBytes = headerBytes + 8192
    /// The most frames a packet may carry: 120 ms at 48 kHz (Opus's longest packet).
    public static let maximumFrames = 5760
    /// The longest Opus payload taken (an Opus frame is at most 1275 bytes; a packet of several, at 64 kbit/s, far
    /// less).
    public static let maximumOpusBytes = 1500
    /// The rates a packet may be at.
    public static let sampleRates = 8000...48_000

    /// A packet as given; ``encoded()`` writes it.
    public init(
        codec: Codec, sequence: UInt32, captureMicroseconds: Int64, sampleRate: Int, channelCount: Int, isFirst: Bool = false,
        frameCount: Int, payload: [UInt8]
    ) {
        self.codec = codec
        self.sequence = sequence
        self.captureMicroseconds = captureMicroseconds
        self.sampleRate = sampleRate
        self.channelCount = channelCount
        self.isFirst = isFirst
        self.frameCount = frameCount
        self.payload = payload
    }

    /// Reads a message.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` naming the field that is wrong.
    public init(decoding bytes: some Collection<UInt8>) throws(AudioError) {
        guard bytes.count >= Self.headerBytes else {
            throw AudioError(.invalidFormat, "a phone audio message of \(bytes.count) bytes: the header alone is \(Self.headerBytes)")
        }
        guard bytes.count <= Self.maximumBytes else {
            throw AudioError(.invalidFormat, "a phone audio message of \(bytes.count) bytes: at most \(Self.maximumBytes)")
        }
        let b = Array(bytes.prefix(Self.headerBytes))
        func unsigned(_ at: Int, _ count: Int) -> UInt64 {
            var value: UInt64 = 0
            for i in (0..<count).reversed() { value = value << 8 | UInt64(b[at + i]) }
            return value
        }
        guard b[0] == 0x4C, b[1] == 0x41 else { throw AudioError(.invalidFormat, "not a phone audio message (it starts with LA)") }
        guard b[2] == 1 else { throw AudioError(.invalidFormat, "phone audio version \(b[2]): this room reads version 1 (reload the page)") }
        guard let codec = Codec(rawValue: b[3]) else { throw AudioError(.invalidFormat, "phone audio codec \(b[3]): 0 (PCM) or 1 (Opus)") }
        let rate = Int(unsigned(16, 4))
        guard Self.sampleRates.contains(rate), codec != .opus || rate == 48_000 else {
            throw AudioError(.invalidFormat, "phone audio at \(rate) Hz: 8000 … 48000 Hz, Opus at 48000")
        }
        let channels = Int(b[20])
        guard channels == 1 || channels == 2 else { throw AudioError(.invalidFormat, "phone audio with \(channels) channels: 1 or 2") }
        guard b[21] & 0xFE == 0 else { throw AudioError(.invalidFormat, "phone audio flags \(b[21]): only bit 0 is defined") }
        let frames = Int(unsigned(22, 2))
        guard (1...Self.maximumFrames).contains(frames) else {
            throw AudioError(.invalidFormat, "a phone audio packet of \(frames) frames: 1 … \(Self.maximumFrames)")
        }
        let payload = Array(bytes.dropFirst(Self.headerBytes))
        switch codec {
        case .pcm16:
            guard payload.count == frames * channels * 2 else {
                throw AudioError(.invalidFormat, "a PCM packet of \(frames) frames × \(channels) channels has \(payload.count) bytes, not \(frames * channels * 2)")
            }
        case .opus:
            guard (1...Self.maximumOpusBytes).contains(payload.count) else {
                throw AudioError(.invalidFormat, "an Opus packet of \(payload.count) bytes: 1 … \(Self.maximumOpusBytes)")
            }
        }
        self.init(
            codec: codec, sequence: UInt32(truncatingIfNeeded: unsigned(4, 4)), captureMicroseconds: Int64(bitPattern: unsigned(8, 8)),
            sampleRate: rate, channelCount: channels, isFirst: b[21] & 1 == 1, frameCount: frames, payload: payload)
    }

    /// The message's bytes (what ``init(decoding:)`` reads back).
    public func encoded() -> [UInt8] {
        var out: [UInt8] = [0x4C, 0x41, 1, codec.rawValue]
        out.reserveCapacity(Self.headerBytes + payload.count)
        func put(_ value: UInt64, _ count: Int) { for i in 0..<count { out.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(i)))) } }
        put(UInt64(sequence), 4)
        put(UInt64(bitPattern: captureMicroseconds), 8)
        put(UInt64(sampleRate), 4)
        out.append(UInt8(truncatingIfNeeded: channelCount))
        out.append(isFirst ? 1 : 0)
        put(UInt64(frameCount), 2)
        out += payload
        return out
    }

    /// The PCM payload as float samples, channels interleaved (empty for Opus: the decoder's job).
    public func pcmSamples() -> [Float] {
        guard codec == .pcm16 else { return [] }
        var out = [Float](repeating: 0, count: payload.count / 2)
        for i in out.indices {
            let v = Int16(bitPattern: UInt16(payload[2 * i]) | UInt16(payload[2 * i + 1]) << 8)
            out[i] = Float(v) / 32_768
        }
        return out
    }
}
