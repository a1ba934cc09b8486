import AudioCore

/// FLV tag types (Adobe FLV 10.1, E.4.1).
public enum FLVTagType: UInt8, Sendable {
    /// An audio tag (8).
    case audio = 8
    /// A video tag (9).
    case video = 9
    /// A script data tag (18): AMF0 values, such as onMetaData.
    case script = 18
}

/// The 9-byte FLV file header, followed in the file by PreviousTagSize0 (always 0).
public struct FLVHeader: Hashable, Sendable {
    /// The header's length in bytes: 9 (without PreviousTagSize0).
    public static let size = 9
    /// The flag that says the file has audio tags.
    public var hasAudio: Bool
    /// The flag that says the file has video tags.
    public var hasVideo: Bool

    /// A header with the given flags.
    /// - Parameters:
    ///   - hasAudio: whether the file has audio tags (default true).
    ///   - hasVideo: whether the file has video tags (default false).
    public init(hasAudio: Bool = true, hasVideo: Bool = false) {
        self.hasAudio = hasAudio
        self.hasVideo = hasVideo
    }

    /// The header and PreviousTagSize0: 13 bytes.
    public func encoded() -> [UInt8] {
        let flags: UInt8 = (hasAudio ? 0x04 : 0) | (hasVideo ? 0x01 : 0)
        return [0x46, 0x4C, 0x56, 0x01, flags, 0, 0, 0, 9, 0, 0, 0, 0]
    }

    /// Parses the header at the start of `bytes`; returns it and the offset of the first tag (after
    /// PreviousTagSize0).
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedFile` when the bytes are not FLV, `.corruptFile` when truncated
    ///   or inconsistent.
    public static func parse(_ bytes: [UInt8]) throws(AudioError) -> (FLVHeader, firstTagOffset: Int) {
        try parse(prefix: bytes, size: Int64(bytes.count)) { (offset: Int64) throws(AudioError) in readUInt32(bytes, Int(offset)) }
    }

    /// ``parse(_:)`` from the first bytes of a file of `size` bytes (at least the first 13, or all of a shorter one)
    /// and a reader of PreviousTagSize0, wherever the header puts it: a file check reads no more than that.
    static func parse(
        prefix bytes: [UInt8], size: Int64, uint32At: (Int64) throws(AudioError) -> UInt32
    ) throws(AudioError) -> (FLVHeader, firstTagOffset: Int) {
        guard bytes.count >= 3, bytes[0] == 0x46, bytes[1] == 0x4C, bytes[2] == 0x56 else {
            throw AudioError(.unsupportedFile, "not an FLV file: it does not start with 'FLV'")
        }
        guard size >= Int64(Self.size + 4), bytes.count >= Self.size else {
            throw AudioError(.corruptFile, "FLV: the file header is truncated (\(size) of 13 bytes)")
        }
        guard bytes[3] == 1 else { throw AudioError(.unsupportedFile, "FLV version \(bytes[3]) (only version 1 exists)") }
        let dataOffset = Int64(readUInt32(bytes, 5))
        guard dataOffset >= Int64(Self.size), dataOffset + 4 <= size else {
            throw AudioError(.corruptFile, "FLV: a header size of \(dataOffset) bytes cannot be")
        }
        let previous = try uint32At(dataOffset)
        guard previous == 0 else {
            throw AudioError(.corruptFile, "FLV: PreviousTagSize0 is \(previous), not 0")
        }
        return (FLVHeader(hasAudio: bytes[4] & 0x04 != 0, hasVideo: bytes[4] & 0x01 != 0), Int(dataOffset) + 4)
    }
}

/// One FLV tag: type, timestamp in milliseconds and payload. In the file each tag is followed by its
/// PreviousTagSize (11 + payload length).
public struct FLVTag: Hashable, Sendable {
    /// The tag header's length in bytes: 11.
    public static let headerSize = 11
    /// What the tag carries.
    public var type: FLVTagType
    /// Milliseconds, 32 bits (the low 24 in the header, the high 8 in the extension byte).
    public var timestamp: UInt32
    /// The payload (less than 16 MiB).
    public var data: [UInt8]

    /// A tag with the given values.
    /// - Parameters:
    ///   - type: what the tag carries.
    ///   - timestamp: milliseconds.
    ///   - data: the payload.
    public init(type: FLVTagType, timestamp: UInt32, data: [UInt8]) {
        self.type = type
        self.timestamp = timestamp
        self.data = data
    }

    /// The tag's bytes followed by its PreviousTagSize.
    /// - Precondition: the payload fits the 24-bit size field (16 MiB).
    public func encoded() -> [UInt8] {
        precondition(data.count < 1 << 24, "an FLV tag holds less than 16 MiB")
        let size = data.count
        var out: [UInt8] = [
            type.rawValue, UInt8(size >> 16), UInt8(size >> 8 & 0xFF), UInt8(size & 0xFF),
            UInt8(timestamp >> 16 & 0xFF), UInt8(timestamp >> 8 & 0xFF), UInt8(timestamp & 0xFF), UInt8(timestamp >> 24),
            0, 0, 0,
        ]
        out.reserveCapacity(Self.headerSize + size + 4)
        out += data
        let previous = UInt32(Self.headerSize + size)
        out += [UInt8(previous >> 24), UInt8(previous >> 16 & 0xFF), UInt8(previous >> 8 & 0xFF), UInt8(previous & 0xFF)]
        return out
    }

    /// Parses the tag at `offset` and its PreviousTagSize; returns the tag and the offset after it.
    /// - Throws: ``/AudioCore/AudioError`` `.corruptFile` naming the offset: a truncated tag, an unknown type, an
    ///   encrypted (filtered) tag, a non-zero stream id, or a PreviousTagSize that does not match.
    public static func parse(_ bytes: [UInt8], at offset: Int) throws(AudioError) -> (FLVTag, next: Int) {
        let head = try parseHeader(bytes[offset..<min(bytes.count, offset + headerSize)], at: Int64(offset), left: Int64(bytes.count - offset))
        let end = offset + headerSize + head.size
        try checkPreviousTagSize(readUInt32(bytes, end), head: head, at: Int64(offset))
        return (FLVTag(type: head.type, timestamp: head.timestamp, data: Array(bytes[offset + headerSize..<end])), end + 4)
    }

    /// What an 11-byte tag header says.
    struct Head {
        var type: FLVTagType
        var size: Int
        var timestamp: UInt32
    }

    /// Parses the tag header in `h` (the bytes at `offset`, 11 unless the file ends sooner), checking that the tag
    /// and its PreviousTagSize fit the `left` bytes from `offset` to the end of the file.
    static func parseHeader(_ h: ArraySlice<UInt8>, at offset: Int64, left: Int64) throws(AudioError) -> Head {
        guard h.count >= headerSize else {
            throw AudioError(.corruptFile, "FLV: the tag at byte \(offset) is truncated (\(h.count) of 11 header bytes)")
        }
        let b = h.startIndex
        let typeByte = h[b]
        guard typeByte & 0x20 == 0 else {
            throw AudioError(.corruptFile, "FLV: the tag at byte \(offset) is encrypted (filtered), which is not supported")
        }
        guard let type = FLVTagType(rawValue: typeByte & 0x1F) else {
            throw AudioError(.corruptFile, "FLV: unknown tag type \(typeByte) at byte \(offset)")
        }
        let size = Int(h[b + 1]) << 16 | Int(h[b + 2]) << 8 | Int(h[b + 3])
        let timestamp = UInt32(h[b + 7]) << 24 | UInt32(h[b + 4]) << 16 | UInt32(h[b + 5]) << 8 | UInt32(h[b + 6])
        guard h[b + 8] == 0, h[b + 9] == 0, h[b + 10] == 0 else {
            throw AudioError(.corruptFile, "FLV: the tag at byte \(offset) has a non-zero stream id")
        }
        guard Int64(headerSize + size + 4) <= left else {
            throw AudioError(
                .corruptFile, "FLV: the tag at byte \(offset) is truncated (it needs \(headerSize + size + 4) bytes, \(left) left)")
        }
        return Head(type: type, size: size, timestamp: timestamp)
    }

    static func checkPreviousTagSize(_ previous: UInt32, head: Head, at offset: Int64) throws(AudioError) {
        guard previous == UInt32(headerSize + head.size) else {
            throw AudioError(
                .corruptFile,
                "FLV: the PreviousTagSize after the tag at byte \(offset) is \(previous), not \(headerSize + head.size)")
        }
    }
}

/// The first byte(s) of an FLV audio tag for AAC (E.4.2.1): sound format 10, the flags FLV insists on for AAC
/// (44 kHz, 16-bit; the real rate is in the AudioSpecificConfig), mono or stereo, then the AACPacketType.
public enum FLVAudio {
    /// AACPacketType 0: the payload is an AudioSpecificConfig.
    public static let sequenceHeader: UInt8 = 0
    /// AACPacketType 1: the payload is one raw AAC access unit.
    public static let raw: UInt8 = 1
    /// SoundFormat 10 is AAC.
    public static let aacCodecID = 10

    /// onMetaData's audio properties for an AAC stream: duration 0 (live, or patched in later), audiodatarate
    /// (kbit/s), audiosamplerate, audiosamplesize 16, stereo, audiocodecid 10.
    public static func metadata(sampleRate: Double, channelCount: Int, bitRate: Int) -> [AMF0Property] {
        [
            AMF0Property("duration", .number(0)),
            AMF0Property("audiodatarate", .number(Double(bitRate) / 1000)),
            AMF0Property("audiosamplerate", .number(sampleRate)),
            AMF0Property("audiosamplesize", .number(16)),
            AMF0Property("stereo", .boolean(channelCount > 1)),
            AMF0Property("audiocodecid", .number(Double(aacCodecID))),
        ]
    }

    /// The two-byte prefix of an AAC audio tag.
    public static func aacPrefix(stereo: Bool, packetType: UInt8) -> [UInt8] {
        [UInt8(aacCodecID << 4 | 3 << 2 | 1 << 1 | (stereo ? 1 : 0)), packetType]
    }

    /// What an AAC audio tag says.
    public struct AACTag: Hashable, Sendable {
        /// The SoundType flag: true for stereo, false for mono.
        public var stereo: Bool
        /// The AACPacketType: ``FLVAudio/sequenceHeader`` or ``FLVAudio/raw``.
        public var packetType: UInt8
        /// The bytes after the two-byte prefix: an AudioSpecificConfig or a raw AAC access unit.
        public var payload: ArraySlice<UInt8>
    }

    /// Parses an audio tag's payload as AAC.
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedFile` for another codec, `.corruptFile` for a truncated tag or
    ///   an unknown AACPacketType.
    public static func parseAAC(_ data: [UInt8]) throws(AudioError) -> AACTag {
        guard let first = data.first else { throw AudioError(.corruptFile, "FLV: an empty audio tag") }
        let format = Int(first >> 4)
        guard format == aacCodecID else {
            throw AudioError(.unsupportedFile, "FLV: the audio tag holds sound format \(format), not AAC (10)")
        }
        guard data.count >= 2 else { throw AudioError(.corruptFile, "FLV: an AAC audio tag without its AACPacketType") }
        guard data[1] <= 1 else { throw AudioError(.corruptFile, "FLV: AACPacketType \(data[1]) is neither 0 nor 1") }
        return AACTag(stereo: first & 1 == 1, packetType: data[1], payload: data[2...])
    }
}

/// A whole FLV file, parsed: the header, every tag and the onMetaData values when there are any.
public struct FLVContents: Sendable {
    /// The file header.
    public var header: FLVHeader
    /// Every tag, in file order.
    public var tags: [FLVTag]
    /// The properties of the first `onMetaData` script tag.
    public var metadata: AMF0Value?

    /// Parses `bytes`.
    /// - Throws: ``/AudioCore/AudioError`` from ``FLVHeader/parse(_:)``, ``FLVTag/parse(_:at:)`` and, for an onMetaData
    ///   tag, ``AMF0``.
    public init(parsing bytes: [UInt8]) throws(AudioError) {
        let (header, first) = try FLVHeader.parse(bytes)
        self.header = header
        tags = []
        var offset = first
        while offset < bytes.count {
            let (tag, next) = try FLVTag.parse(bytes, at: offset)
            if tag.type == .script, metadata == nil {
                let values = try AMF0.decodeAll(tag.data)
                if values.first?.stringValue == "onMetaData", values.count >= 2 { metadata = values[1] }
            }
            tags.append(tag)
            offset = next
        }
    }

    /// What ``check(path:)`` found.
    public struct Summary: Sendable {
        /// The file header.
        public var header: FLVHeader
        /// The number of tags of every type.
        public var tagCount: Int
        /// The number of audio tags.
        public var audioTagCount: Int
        /// The properties of the first `onMetaData` script tag.
        public var metadata: AMF0Value?
    }

    /// Checks the file at `path` tag by tag as ``init(parsing:)`` does, reading it through a 1 MiB window and
    /// keeping no tag's data but the first onMetaData's: memory stays the same for a file of any size.
    /// - Throws: what ``init(parsing:)`` throws.
    public static func check(path: String) throws(AudioError) -> Summary {
        let file = try FileWindow(path: path)
        guard file.size > 0 else { throw AudioError(.corruptFile, "'\(path)' is empty") }
        // The header's 9 bytes and PreviousTagSize0 wherever the header says (a data offset may be anything).
        let (header, first) = try FLVHeader.parse(prefix: Array(try file.bytes(at: 0, count: FLVHeader.size)), size: file.size) {
            (offset: Int64) throws(AudioError) in try uint32(file, at: offset, path: path)
        }
        var summary = Summary(header: header, tagCount: 0, audioTagCount: 0, metadata: nil)
        var offset = Int64(first)
        while offset < file.size {
            let head = try FLVTag.parseHeader(
                try file.bytes(at: offset, count: FLVTag.headerSize), at: offset, left: file.size - offset)
            let end = offset + Int64(FLVTag.headerSize + head.size)
            try FLVTag.checkPreviousTagSize(try uint32(file, at: end, path: path), head: head, at: offset)
            if head.type == .script, summary.metadata == nil {
                let data = Array(try file.bytes(at: offset + Int64(FLVTag.headerSize), count: head.size))
                let values = try AMF0.decodeAll(data)
                if values.first?.stringValue == "onMetaData", values.count >= 2 { summary.metadata = values[1] }
            }
            summary.tagCount += 1
            if head.type == .audio { summary.audioTagCount += 1 }
            offset = end + 4
        }
        return summary
    }

    /// Four bytes at `offset`; a file that became shorter while it was read (rewritten meanwhile) is an error, not a
    /// trap.
    private static func uint32(_ file: FileWindow, at offset: Int64, path: String) throws(AudioError) -> UInt32 {
        let bytes = Array(try file.bytes(at: offset, count: 4))
        guard bytes.count == 4 else {
            throw AudioError(.corruptFile, "'\(path)' ended at byte \(offset + Int64(bytes.count)) while it was read: it changed meanwhile")
        }
        return readUInt32(bytes, 0)
    }

    /// Reads and parses the file at `path` (every tag's data in memory: use ``check(path:)`` to validate).
    public init(path: String) throws(AudioError) {
        let file = try POSIXFile(path: path, writing: false)
        let size = file.size
        guard size > 0 else { throw AudioError(.corruptFile, "'\(path)' is empty") }
        try self.init(parsing: try file.readBytes(count: Int(size), at: 0))
    }
}

/// Writes an audio-only FLV file of AAC: the header, onMetaData (duration, audiodatarate, audiosamplerate,
/// audiosamplesize, stereo, audiocodecid 10, filesize), the AAC sequence header, then one tag per packet.
///
/// Every tag goes to disk as one write the moment it is given, so a file cut short — the process killed — is
/// playable up to its last tag. ``finish(duration:)`` fills in the duration and file size.
///
/// Thread safety: one thread at a time; does file I/O.
public final class FLVFileWriter {
    /// The file written.
    public let path: String
    /// The sampling rate in Hz, as onMetaData gives it.
    public let sampleRate: Double
    /// The channel count (more than 1 is flagged stereo).
    public let channelCount: Int
    /// The AAC access units written so far (not counting the sequence header).
    public private(set) var packetsWritten = 0
    /// The bytes written so far: header, onMetaData, sequence header and every tag.
    public private(set) var bytesWritten: Int64 = 0
    /// The timestamp of the last tag written.
    public private(set) var lastTimestamp: UInt32 = 0
    private let file: POSIXFile
    private let stereo: Bool
    /// Where onMetaData's duration and filesize numbers (8 bytes each) sit in the file.
    private var durationOffset: Int64 = 0
    private var fileSizeOffset: Int64 = 0
    private var finished = false

    /// Creates (or truncates) `path` and writes the header, onMetaData and the AAC sequence header.
    /// - Parameters:
    ///   - path: the file to create.
    ///   - sampleRate: the sampling rate in Hz, for `audiosamplerate`.
    ///   - channelCount: the channel count; more than 1 is flagged stereo.
    ///   - bitRate: bits per second, for `audiodatarate` (kbit/s).
    ///   - audioSpecificConfig: the encoder's; FLV carries it in the sequence header.
    /// - Throws: ``/AudioCore/AudioError`` `.corruptFile` for an AudioSpecificConfig that does not parse, `.fileIO`.
    public init(path: String, sampleRate: Double, channelCount: Int, bitRate: Int, audioSpecificConfig: [UInt8])
        throws(AudioError)
    {
        _ = try AudioSpecificConfig(parsing: audioSpecificConfig)
        self.path = path
        self.sampleRate = sampleRate
        self.channelCount = channelCount
        stereo = channelCount > 1
        file = try POSIXFile(path: path, writing: true)
        var bytes = FLVHeader().encoded()
        let metadata = AMF0.encode([
            .string("onMetaData"),
            .ecmaArray(
                FLVAudio.metadata(sampleRate: sampleRate, channelCount: channelCount, bitRate: bitRate)
                    + [AMF0Property("filesize", .number(0))]),
        ])
        // Each number follows its key: marker byte, then 8 bytes.
        let base = bytes.count + FLVTag.headerSize
        durationOffset = Int64(base + Self.offset(ofNumber: "duration", in: metadata))
        fileSizeOffset = Int64(base + Self.offset(ofNumber: "filesize", in: metadata))
        bytes += FLVTag(type: .script, timestamp: 0, data: metadata).encoded()
        bytes += FLVTag(
            type: .audio, timestamp: 0,
            data: FLVAudio.aacPrefix(stereo: stereo, packetType: FLVAudio.sequenceHeader) + audioSpecificConfig
        ).encoded()
        try file.write(bytes: bytes)
        bytesWritten = Int64(bytes.count)
    }

    /// The offset of the 8-byte number after `key` in an encoded metadata block.
    private static func offset(ofNumber key: String, in encoded: [UInt8]) -> Int {
        let needle = [UInt8(0), UInt8(key.utf8.count)] + Array(key.utf8) + [AMF0.Marker.number.rawValue]
        for i in 0...(encoded.count - needle.count) where Array(encoded[i..<i + needle.count]) == needle {
            return i + needle.count
        }
        preconditionFailure("metadata without \(key)")
    }

    /// Appends one raw AAC access unit at `milliseconds`.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for a timestamp before the last one or beyond 32 bits,
    ///   `.fileIO`.
    public func writeAAC(_ payload: [UInt8], milliseconds: Int64) throws(AudioError) {
        precondition(!finished, "write after finish")
        guard milliseconds >= Int64(lastTimestamp), milliseconds <= Int64(UInt32.max) else {
            throw AudioError(
                .invalidParameter,
                "FLV timestamps must not go back and fit 32 bits: \(milliseconds) ms after \(lastTimestamp) ms")
        }
        let tag = FLVTag(
            type: .audio, timestamp: UInt32(milliseconds),
            data: FLVAudio.aacPrefix(stereo: stereo, packetType: FLVAudio.raw) + payload
        ).encoded()
        try file.write(bytes: tag)
        lastTimestamp = UInt32(milliseconds)
        packetsWritten += 1
        bytesWritten += Int64(tag.count)
    }

    /// Writes the duration (seconds) and file size into onMetaData and closes the file.
    public func finish(duration: Double) throws(AudioError) {
        guard !finished else { return }
        finished = true
        defer { file.close() }
        var number: [UInt8] = []
        AMF0.appendDouble(duration, into: &number)
        try file.write(bytes: number, at: durationOffset)
        number.removeAll()
        AMF0.appendDouble(Double(bytesWritten), into: &number)
        try file.write(bytes: number, at: fileSizeOffset)
    }

    /// Closes the file as it is (playable; its onMetaData duration stays 0).
    public func abandon() {
        finished = true
        file.close()
    }
}

func readUInt32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
    UInt32(bytes[at]) << 24 | UInt32(bytes[at + 1]) << 16 | UInt32(bytes[at + 2]) << 8 | UInt32(bytes[at + 3])
}
