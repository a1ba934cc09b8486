import AudioCore

/// The MPEG-4 audio sampling-frequency table (ISO 14496-3, Table 1.18): index → rate.
public enum AACSamplingFrequency {
    /// The 13 rates in Hz, by index: 96000 (index 0) down to 7350 (index 12); indices 13 and 14 are reserved, and
    /// 15 means an explicit 24-bit rate follows.
    public static let rates: [Double] = [
        96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025, 8_000, 7_350,
    ]

    /// The index of `rate`, or nil when the table has no such rate.
    public static func index(of rate: Double) -> Int? { rates.firstIndex(of: rate) }
}

/// An AudioSpecificConfig (ISO 14496-3 §1.6.2.1): what an MP4 `esds`, an FLV AAC sequence header and RTMP carry to
/// describe an AAC stream. Read and written here for the common case: a 5-bit object type, a rate from the table
/// (or an explicit 24-bit rate), a channel configuration; what follows (GASpecificConfig, extensions) is kept as is.
public struct AudioSpecificConfig: Hashable, Sendable {
    /// 2: AAC-LC; 1: Main; 5: SBR (HE-AAC); 29: PS (HE-AACv2); 23: LD; 39: ELD.
    public var objectType: Int
    /// The sampling rate in Hz.
    public var sampleRate: Double
    /// 1…7 (channel configurations), 0 when a program config element says it.
    public var channelConfiguration: Int

    /// A configuration with the given values, unchecked (``encoded()`` checks them).
    /// - Parameters:
    ///   - objectType: the MPEG-4 audio object type (2: AAC-LC).
    ///   - sampleRate: the sampling rate in Hz.
    ///   - channelConfiguration: the channel configuration, 0…7.
    public init(objectType: Int, sampleRate: Double, channelConfiguration: Int) {
        self.objectType = objectType
        self.sampleRate = sampleRate
        self.channelConfiguration = channelConfiguration
    }

    /// Parses `bytes`.
    /// - Throws: ``/AudioCore/AudioError`` `.corruptFile` for truncated input or a reserved value.
    public init(parsing bytes: [UInt8]) throws(AudioError) {
        var reader = BitReader(bytes)
        guard bytes.count >= 2 else {
            throw AudioError(.corruptFile, "an AudioSpecificConfig needs at least 2 bytes, got \(bytes.count)")
        }
        var type = try reader.read(5)
        if type == 31 { type = 32 + (try reader.read(6)) }
        guard type != 0 else { throw AudioError(.corruptFile, "AudioSpecificConfig: object type 0 is not a codec") }
        let index = try reader.read(4)
        let rate: Double
        if index == 15 {
            rate = Double(try reader.read(24))
        } else {
            guard index < AACSamplingFrequency.rates.count else {
                throw AudioError(.corruptFile, "AudioSpecificConfig: sampling frequency index \(index) is reserved")
            }
            rate = AACSamplingFrequency.rates[index]
        }
        guard rate > 0 else { throw AudioError(.corruptFile, "AudioSpecificConfig: a sampling rate of 0") }
        let channels = try reader.read(4)
        guard channels <= 7 else {
            throw AudioError(.corruptFile, "AudioSpecificConfig: channel configuration \(channels) is reserved")
        }
        objectType = type
        sampleRate = rate
        channelConfiguration = channels
    }

    /// The channel count the configuration stands for (7 → 8 channels, 7.1).
    public var channelCount: Int { channelConfiguration == 7 ? 8 : channelConfiguration }

    /// The two-byte form (object type < 31, a rate from the table) with a plain GASpecificConfig.
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedSampleRate` when the rate is not in the table,
    ///   `.invalidFormat` when the object type is not 1…30 or the channel configuration not 0…7.
    public func encoded() throws(AudioError) -> [UInt8] {
        guard let index = AACSamplingFrequency.index(of: sampleRate) else {
            throw AudioError(.unsupportedSampleRate, "AAC has no sampling frequency index for \(formatHz(sampleRate))")
        }
        guard (1..<31).contains(objectType), (0...7).contains(channelConfiguration) else {
            throw AudioError(.invalidFormat, "object type \(objectType) / channel configuration \(channelConfiguration) do not fit")
        }
        let bits = objectType << 11 | index << 7 | channelConfiguration << 3
        return [UInt8(bits >> 8), UInt8(bits & 0xFF)]
    }
}

/// The 7-byte ADTS header (ISO 13818-7 §6.2, no CRC) that makes a raw AAC access unit self-describing: what an
/// `.aac` file is, frame after frame. A file cut anywhere stays playable up to its last whole frame.
public struct ADTSHeader: Hashable, Sendable {
    /// The header's length in bytes: 7 (no CRC).
    public static let size = 7
    /// The MPEG-4 object type (2: AAC-LC); ADTS stores it minus one, so 1…4 only.
    public var objectType: Int
    /// The sampling rate in Hz; ADTS can only carry one of ``AACSamplingFrequency/rates``.
    public var sampleRate: Double
    /// The channel configuration, 0…7 (7 is 8 channels, 7.1).
    public var channelConfiguration: Int
    /// The payload: raw AAC bytes after the header.
    public var payloadLength: Int

    /// A header with the given values, unchecked (``encoded()`` checks them).
    /// - Parameters:
    ///   - objectType: the MPEG-4 object type, 1…4 (default 2: AAC-LC).
    ///   - sampleRate: the sampling rate in Hz.
    ///   - channelConfiguration: the channel configuration, 0…7.
    ///   - payloadLength: the raw AAC bytes after the header.
    public init(objectType: Int = 2, sampleRate: Double, channelConfiguration: Int, payloadLength: Int) {
        self.objectType = objectType
        self.sampleRate = sampleRate
        self.channelConfiguration = channelConfiguration
        self.payloadLength = payloadLength
    }

    /// The frame's whole length: header and payload (ADTS counts both), at most 8191 bytes.
    public var frameLength: Int { Self.size + payloadLength }

    /// The header's bytes.
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedSampleRate` for a rate not in the table, `.invalidFormat` for
    ///   other values ADTS cannot hold (object type, channel configuration, a frame longer than 8191 bytes).
    public func encoded() throws(AudioError) -> [UInt8] {
        guard let index = AACSamplingFrequency.index(of: sampleRate) else {
            throw AudioError(.unsupportedSampleRate, "ADTS has no sampling frequency index for \(formatHz(sampleRate))")
        }
        guard (1...4).contains(objectType) else {
            throw AudioError(.invalidFormat, "ADTS carries object types 1 to 4 (AAC-LC is 2), not \(objectType)")
        }
        guard (0...7).contains(channelConfiguration) else {
            throw AudioError(.invalidFormat, "ADTS channel configuration must be 0…7, got \(channelConfiguration)")
        }
        guard payloadLength >= 0, frameLength <= 0x1FFF else {
            throw AudioError(.invalidFormat, "an ADTS frame holds at most 8184 bytes of payload, got \(payloadLength)")
        }
        let length = frameLength
        let profile = objectType - 1
        return [
            0xFF,
            0xF1,  // sync, MPEG-4, layer 0, no CRC
            UInt8(profile << 6 | index << 2 | channelConfiguration >> 2),
            UInt8((channelConfiguration & 3) << 6 | length >> 11),
            UInt8((length >> 3) & 0xFF),
            UInt8((length & 7) << 5 | 0x1F),  // buffer fullness 0x7FF (variable rate)
            0xFC,  // ... and one raw data block
        ]
    }

    /// Parses the header at the start of `bytes`.
    /// - Throws: ``/AudioCore/AudioError`` `.corruptFile` for a truncated header, a lost sync word, a CRC-protected or
    ///   multi-block frame, a reserved rate or a length that cannot be.
    public init<Bytes: RandomAccessCollection>(parsing bytes: Bytes) throws(AudioError) where Bytes.Element == UInt8, Bytes.Index == Int {
        guard bytes.count >= Self.size else {
            throw AudioError(.corruptFile, "an ADTS header needs 7 bytes, only \(bytes.count) left")
        }
        let b = bytes.startIndex
        let h = (0..<7).map { Int(bytes[b + $0]) }
        guard h[0] == 0xFF, h[1] & 0xF6 == 0xF0 else {
            throw AudioError(
                .corruptFile, "ADTS: no sync word (found \(hexByte(h[0])) \(hexByte(h[1])), expected FF F1 or FF F9)")
        }
        let index = (h[2] >> 2) & 0xF
        guard index < AACSamplingFrequency.rates.count else {
            throw AudioError(.corruptFile, "ADTS: sampling frequency index \(index) is reserved")
        }
        let length = (h[3] & 3) << 11 | h[4] << 3 | h[5] >> 5
        let protectionAbsent = h[1] & 1 == 1
        let headerSize = protectionAbsent ? 7 : 9
        guard length >= headerSize else {
            throw AudioError(.corruptFile, "ADTS: a frame length of \(length) is shorter than its header")
        }
        guard protectionAbsent, h[6] & 3 == 0 else {
            throw AudioError(.corruptFile, "ADTS frames with a CRC or several raw data blocks are not supported")
        }
        objectType = (h[2] >> 6) + 1
        sampleRate = AACSamplingFrequency.rates[index]
        channelConfiguration = (h[2] & 1) << 2 | h[3] >> 6
        payloadLength = length - Self.size
    }
}

/// "0A", "FF".
func hexByte(_ v: Int) -> String {
    let digits = String(v & 0xFF, radix: 16, uppercase: true)
    return digits.count == 1 ? "0" + digits : digits
}

/// Reads bits most significant first.
struct BitReader {
    private let bytes: [UInt8]
    private var position = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func read(_ count: Int) throws(AudioError) -> Int {
        guard position + count <= bytes.count * 8 else {
            throw AudioError(.corruptFile, "truncated: needed \(count) more bits at bit \(position) of \(bytes.count * 8)")
        }
        var value = 0
        for _ in 0..<count {
            let byte = Int(bytes[position >> 3])
            value = value << 1 | (byte >> (7 - position & 7)) & 1
            position += 1
        }
        return value
    }
}

/// Writes an ADTS (`.aac`) file: each packet gets its header and goes to disk at once, so a file cut short — the
/// process killed — is playable up to its last whole frame.
///
/// Thread safety: one thread at a time; does file I/O.
public final class ADTSFileWriter {
    /// The file written.
    public let path: String
    /// The sampling rate in Hz.
    public let sampleRate: Double
    /// The ADTS channel configuration: the channel count, or 7 for 8 channels.
    public let channelConfiguration: Int
    /// The access units written so far.
    public private(set) var packetsWritten = 0
    /// The bytes written so far, headers included.
    public private(set) var bytesWritten: Int64 = 0
    private let file: POSIXFile
    private var header: ADTSHeader

    /// Creates (or truncates) `path` for AAC-LC (object type 2) at `sampleRate` with `channelCount` channels.
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedSampleRate`, `.invalidFormat` (not 1–6 or 8 channels),
    ///   `.fileIO`.
    public init(path: String, sampleRate: Double, channelCount: Int) throws(AudioError) {
        guard AACSamplingFrequency.index(of: sampleRate) != nil else {
            throw AudioError(.unsupportedSampleRate, "ADTS has no sampling frequency index for \(formatHz(sampleRate))")
        }
        guard (1...8).contains(channelCount), channelCount != 7 else {
            throw AudioError(.invalidFormat, "ADTS signals 1–6 or 8 channels, not \(channelCount)")
        }
        self.path = path
        self.sampleRate = sampleRate
        channelConfiguration = channelCount == 8 ? 7 : channelCount
        header = ADTSHeader(sampleRate: sampleRate, channelConfiguration: channelConfiguration, payloadLength: 0)
        file = try POSIXFile(path: path, writing: true)
    }

    /// Appends one raw AAC access unit with its header.
    public func write(_ payload: [UInt8]) throws(AudioError) {
        header.payloadLength = payload.count
        try file.write(bytes: try header.encoded() + payload)
        packetsWritten += 1
        bytesWritten += Int64(header.frameLength)
    }

    /// Closes the file.
    public func finish() { file.close() }
}

/// A whole ADTS stream (an `.aac` file), checked frame by frame.
public enum ADTSStream {
    /// The headers of every frame in `bytes`, after an optional ID3v2 tag.
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedFile` when the bytes do not start with an ADTS frame,
    ///   `.corruptFile` naming the byte offset when the sync is lost, a header is damaged or the last frame is cut
    ///   short.
    public static func frames(in bytes: [UInt8]) throws(AudioError) -> [ADTSHeader] {
        var offset = min(bytes.count, id3Length(bytes))
        guard bytes.count - offset >= 2, bytes[offset] == 0xFF, bytes[offset + 1] & 0xF6 == 0xF0 else {
            throw AudioError(.unsupportedFile, "not an ADTS (.aac) stream: no ADTS sync word at byte \(offset)")
        }
        var headers: [ADTSHeader] = []
        while offset < bytes.count {
            let header: ADTSHeader
            do throws(AudioError) {
                header = try ADTSHeader(parsing: bytes[offset...])
            } catch {
                throw AudioError(.corruptFile, "ADTS frame \(headers.count) at byte \(offset): \(error.message)")
            }
            guard offset + header.frameLength <= bytes.count else {
                throw AudioError(
                    .corruptFile,
                    "ADTS frame \(headers.count) at byte \(offset) is cut short: it needs \(header.frameLength) bytes, "
                        + "\(bytes.count - offset) left")
            }
            if let first = headers.first,
                header.sampleRate != first.sampleRate || header.channelConfiguration != first.channelConfiguration
            {
                throw AudioError(
                    .corruptFile, "ADTS frame \(headers.count) at byte \(offset) changes the rate or channel layout")
            }
            headers.append(header)
            offset += header.frameLength
        }
        return headers
    }

    /// The headers of every frame in the file at `path`; errors name the file.
    public static func frames(path: String) throws(AudioError) -> [ADTSHeader] {
        let file = try POSIXFile(path: path, writing: false)
        do throws(AudioError) {
            return try frames(in: try file.readBytes(count: Int(file.size), at: 0))
        } catch {
            throw AudioError(error.code, "'\(path)': \(error.message)")
        }
    }

    /// What ``check(path:)`` found: the number of frames and the first frame's header.
    public struct Summary: Sendable {
        /// The number of frames in the file.
        public var frameCount: Int
        /// The first frame's header (every frame has its rate and channel configuration).
        public var first: ADTSHeader
    }

    /// Checks the file at `path` frame by frame as ``frames(in:)`` does, reading it through a 1 MiB window and
    /// keeping only the first header: memory stays the same for a file of any size.
    /// - Throws: what ``frames(in:)`` throws, naming the file.
    public static func check(path: String) throws(AudioError) -> Summary {
        do throws(AudioError) {
            let file = try FileWindow(path: path)
            var offset = Int64(id3Length(Array(try file.bytes(at: 0, count: 10))))
            if offset > 0 {
                // A long ID3 tag: its length is in its own header; the tag itself is skipped unread.
                offset = min(file.size, offset)
            }
            let sync = try file.bytes(at: offset, count: 2)
            guard sync.count == 2, sync.first == 0xFF, sync.last! & 0xF6 == 0xF0 else {
                throw AudioError(.unsupportedFile, "not an ADTS (.aac) stream: no ADTS sync word at byte \(offset)")
            }
            var count = 0
            var first: ADTSHeader?
            while offset < file.size {
                let header: ADTSHeader
                do throws(AudioError) {
                    header = try ADTSHeader(parsing: Array(try file.bytes(at: offset, count: 9)))
                } catch where error.code != .fileIO {
                    throw AudioError(.corruptFile, "ADTS frame \(count) at byte \(offset): \(error.message)")
                }
                guard offset + Int64(header.frameLength) <= file.size else {
                    throw AudioError(
                        .corruptFile,
                        "ADTS frame \(count) at byte \(offset) is cut short: it needs \(header.frameLength) bytes, "
                            + "\(file.size - offset) left")
                }
                if let first, header.sampleRate != first.sampleRate || header.channelConfiguration != first.channelConfiguration {
                    throw AudioError(.corruptFile, "ADTS frame \(count) at byte \(offset) changes the rate or channel layout")
                }
                if first == nil { first = header }
                count += 1
                offset += Int64(header.frameLength)
            }
            return Summary(frameCount: count, first: first!)
        } catch {
            throw AudioError(error.code, "'\(path)': \(error.message)")
        }
    }

    /// The size of an ID3v2 tag at the start of `bytes` (0 when there is none).
    static func id3Length(_ bytes: [UInt8]) -> Int {
        guard bytes.count >= 10, bytes[0] == 0x49, bytes[1] == 0x44, bytes[2] == 0x33 else { return 0 }
        let size = (0..<4).reduce(0) { $0 << 7 | Int(bytes[6 + $1] & 0x7F) }
        return 10 + size + (bytes[5] & 0x10 != 0 ? 10 : 0)
    }
}
