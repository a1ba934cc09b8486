import AudioCore

/// What a WAV file holds, as read from its header.
public struct WAVFileInfo: Sendable, Hashable {
    /// The file's sample format (always interleaved).
    public let format: StreamFormat
    /// Whole frames of audio in the data chunk (as far as the file really reaches).
    public let frameCount: Int64
    /// Byte offset of the first sample.
    public let dataOffset: Int64
    /// True when the header promises more data than the file holds (a recording cut short); the missing end is
    /// treated as absent, not as an error.
    public let isTruncated: Bool

    /// ``frameCount`` in seconds.
    public var duration: Double { Double(frameCount) / format.sampleRate }
}

/// Reads a PCM WAV file incrementally: 16-, 24- and 32-bit integer and 32-bit float, any channel count,
/// plain (`WAVE_FORMAT_PCM`/`IEEE_FLOAT`) or `WAVE_FORMAT_EXTENSIBLE` headers.
///
/// Memory does not grow with the file: ``read(into:)`` goes through a fixed chunk buffer allocated at open.
///
/// Thread safety: one thread at a time. ``read(into:)`` does file I/O, so call it from a worker or an offline
/// caller, never from a real-time render thread.
public final class WAVFileReader: @unchecked Sendable {
    // Unchecked Sendable: one thread at a time (read-ahead worker, offline caller or virtual device thread): `position`, `file`, `chunk`
    /// The file read.
    public let path: String
    /// What the header says, as parsed at open.
    public let info: WAVFileInfo
    /// The file's sample format (``WAVFileInfo/format``); ``read(into:)`` delivers Float32 whatever it is.
    public var format: StreamFormat { info.format }
    public var frameCount: Int64 { info.frameCount }
    /// The next frame ``read(into:)`` returns.
    public private(set) var position: Int64 = 0

    private let file: POSIXFile
    private let chunk: RawPCMBuffer
    /// Frames read per system call: the chunk asked for, or the file's length when shorter.
    var chunkCapacity: Int { chunk.capacity }

    /// Opens and parses `path`.
    /// - Parameters:
    ///   - path: the WAV file to read.
    ///   - chunkFrames: frames read from the file per system call at most (16384: 128 KiB of stereo float, so a
    ///     minute is read in about 170 calls).
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` (cannot open or read), `.unsupportedFile` (not WAV, or a sample
    ///   format that is not 16/24/32-bit integer or 32-bit float PCM), `.corruptFile` (inconsistent header).
    public init(path: String, chunkFrames: Int = 16_384) throws(AudioError) {
        self.path = path
        file = try POSIXFile(path: path, writing: false)
        info = try WAVHeaderParser.parse(file)
        // No more than the file holds (16384 frames of 64 channels of 32 bits are 4 MiB, for a file of 44 bytes).
        chunk = RawPCMBuffer(format: info.format, capacity: max(1, min(chunkFrames, Int(clamping: info.frameCount))))
    }

    /// Reads the header only.
    public static func info(path: String) throws(AudioError) -> WAVFileInfo {
        try WAVHeaderParser.parse(POSIXFile(path: path, writing: false))
    }

    /// Reads up to `destination.frameCount` frames, converted to Float32, into `destination` (which has the file's
    /// channel count). Returns the frames read; fewer than asked only at the end of the file, 0 after it.
    /// Does not allocate.
    public func read(into destination: BufferView) throws(AudioError) -> Int {
        var done = 0
        let bytesPerFrame = info.format.bytesPerFrame
        while done < destination.frameCount, position < info.frameCount {
            let frames = min(destination.frameCount - done, chunk.capacity, Int(info.frameCount - position))
            let got = try file.read(
                into: chunk.storage, count: frames * bytesPerFrame, at: info.dataOffset + position * Int64(bytesPerFrame))
            let whole = got / bytesPerFrame
            guard whole > 0 else {
                throw AudioError(.corruptFile, "'\(path)' ends before its data chunk does (frame \(position))")
            }
            PCMConversion.decode(chunk.view(frames: whole), into: destination.slice(from: done, frames: whole))
            done += whole
            position += Int64(whole)
        }
        return done
    }

    /// Moves the read position to `frame` (clamped to the file).
    public func seek(toFrame frame: Int64) {
        position = min(max(frame, 0), info.frameCount)
    }
}

enum WAVHeaderParser {
    static let formatPCM: UInt16 = 1
    static let formatFloat: UInt16 = 3
    static let formatExtensible: UInt16 = 0xFFFE

    static func parse(_ file: POSIXFile) throws(AudioError) -> WAVFileInfo {
        let path = file.path
        let fileSize = file.size
        let header = try file.readBytes(count: 12, at: 0)
        let got = header.count
        guard got == 12, header[0..<4].elementsEqual("RIFF".utf8), header[8..<12].elementsEqual("WAVE".utf8) else {
            if got >= 4, header[0..<4].elementsEqual("RF64".utf8) {
                throw AudioError(.unsupportedFile, "'\(path)' is an RF64 file; only RIFF WAV files are supported")
            }
            throw AudioError(.unsupportedFile, "'\(path)' is not a WAV file (no RIFF/WAVE header)")
        }

        var offset: Int64 = 12
        var fmt: [UInt8]? = nil
        var data: (offset: Int64, size: Int64)? = nil
        while offset + 8 <= fileSize, data == nil {
            let chunkHeader = try file.readBytes(count: 8, at: offset)
            let id = String(decoding: chunkHeader[0..<4], as: UTF8.self)
            let size = Int64(le32(chunkHeader, 4))
            let body = offset + 8
            switch id {
            case "fmt ":
                guard size >= 16, size <= 4096, body + size <= fileSize else {
                    throw AudioError(.corruptFile, "'\(path)': 'fmt ' chunk has an impossible size (\(size) bytes)")
                }
                fmt = try file.readBytes(count: Int(size), at: body)
            case "data":
                guard fmt != nil else {
                    throw AudioError(.corruptFile, "'\(path)': the data chunk comes before the 'fmt ' chunk")
                }
                data = (body, size)
            default:
                break
            }
            offset = body + size + (size & 1)
        }
        guard let fmt else { throw AudioError(.corruptFile, "'\(path)': no 'fmt ' chunk") }
        guard let data else { throw AudioError(.corruptFile, "'\(path)': no 'data' chunk") }

        var tag = le16(fmt, 0)
        let channels = Int(le16(fmt, 2))
        let rate = Double(le32(fmt, 4))
        let blockAlign = Int(le16(fmt, 12))
        let bits = Int(le16(fmt, 14))
        if tag == formatExtensible {
            guard fmt.count >= 40 else {
                throw AudioError(.corruptFile, "'\(path)': WAVE_FORMAT_EXTENSIBLE header is too short")
            }
            tag = le16(fmt, 24)  // the sub-format GUID starts with the format tag
        }
        let sampleType: SampleType
        switch (tag, bits) {
        case (formatPCM, 16): sampleType = .int16
        case (formatPCM, 24): sampleType = .int24
        case (formatPCM, 32): sampleType = .int32
        case (formatFloat, 32): sampleType = .float32
        case (formatPCM, _), (formatFloat, _):
            throw AudioError(
                .unsupportedFile,
                "'\(path)': \(bits)-bit \(tag == formatFloat ? "float" : "integer") samples are not supported "
                    + "(16/24/32-bit integer or 32-bit float)")
        default:
            throw AudioError(.unsupportedFile, "'\(path)': format tag \(tag) is not PCM or IEEE float (compressed WAV)")
        }
        guard channels > 0 else { throw AudioError(.corruptFile, "'\(path)': header says 0 channels") }
        guard rate > 0 else { throw AudioError(.corruptFile, "'\(path)': header says a sample rate of 0 Hz") }
        let format: StreamFormat
        do throws(AudioError) {
            format = try StreamFormat(
                sampleRate: rate, channelCount: channels, sampleType: sampleType, interleaved: true,
                bytesPerFrame: blockAlign, bytesPerPacket: blockAlign, framesPerPacket: 1)
        } catch {
            throw AudioError(error.code == .invalidFormat ? .corruptFile : error.code, "'\(path)': \(error.message)")
        }
        let available = max(fileSize - data.offset, 0)
        let declared = data.size == 0xFFFF_FFFF ? available : data.size
        let bytes = min(declared, available)
        return WAVFileInfo(
            format: format, frameCount: bytes / Int64(blockAlign), dataOffset: data.offset,
            isTruncated: declared > available)
    }

    static func le16(_ b: [UInt8], _ i: Int) -> UInt16 { UInt16(b[i]) | UInt16(b[i + 1]) << 8 }
    static func le32(_ b: [UInt8], _ i: Int) -> UInt32 {
        UInt32(b[i]) | UInt32(b[i + 1]) << 8 | UInt32(b[i + 2]) << 16 | UInt32(b[i + 3]) << 24
    }
}
