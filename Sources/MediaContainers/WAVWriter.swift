#if canImport(Glibc)
import Glibc
#endif
import AudioCore

/// Writes a PCM WAV file as audio arrives: Int16, 24-bit, Int32 or Float32, interleaved.
///
/// The header is written first with placeholder sizes and completed by ``finish(durably:)``. Writing converts through a
/// fixed chunk buffer allocated at creation, so ``write(_:)`` does not allocate however long the file grows.
///
/// Thread safety: one thread at a time; ``write(_:)`` does file I/O, so never call it on a real-time thread.
public final class WAVFileWriter {
    /// The file written (for ``init(temporaryBeside:format:chunkFrames:)``, the temporary file's path).
    public let path: String
    /// The file's sample format (interleaved, or mono).
    public let format: StreamFormat
    /// The frames written so far.
    public private(set) var framesWritten: Int64 = 0
    private let file: POSIXFile
    private let chunk: RawPCMBuffer
    private let headerSize: Int
    private var finished = false
    /// Bytes of the file whose writeback has been started.
    private var writebackStarted: Int64 = 0

    /// Writeback is started in pieces of this many bytes as the file grows.
    static let writebackBytes: Int64 = 1 << 20

    /// The largest data chunk a RIFF file can describe.
    static let maximumDataBytes: Int64 = 0xFFFF_FFFF - 64

    /// Creates (or truncates) `path` and writes the header.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for a format WAV cannot hold, `.fileIO` when the file
    ///   cannot be created or written.
    public convenience init(path: String, format: StreamFormat, chunkFrames: Int = 4096) throws(AudioError) {
        try Self.check(format)
        try self.init(file: try POSIXFile(path: path, writing: true), format: format, chunkFrames: chunkFrames)
    }

    /// Creates a new hidden file with a name no one can predict beside `path` (`.NAME.PID.RANDOM.partial`), made
    /// exclusively: a file or link already there under that name is never opened, let alone truncated. Rename it
    /// over `path` once finished (``path`` names it).
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` when the folder cannot take a new file.
    public convenience init(temporaryBeside path: String, format: StreamFormat, chunkFrames: Int = 4096) throws(AudioError) {
        try Self.check(format)
        let slash = path.lastIndex(of: "/")
        let folder = slash.map { String(path[...$0]) } ?? ""
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        for _ in 0..<64 {
            let candidate =
                folder + ".\(name).\(getpid()).\(String(UInt64.random(in: 0...UInt64.max), radix: 36)).partial"
            if let file = try POSIXFile.createNew(path: candidate) {
                try self.init(file: file, format: format, chunkFrames: chunkFrames)
                return
            }
        }
        throw AudioError(.fileIO, "cannot create a temporary file beside '\(path)': every name tried was taken")
    }

    private static func check(_ format: StreamFormat) throws(AudioError) {
        guard format.isInterleaved || format.channelCount == 1 else {
            throw AudioError(.invalidFormat, "WAV files are interleaved; got \(format)")
        }
    }

    private init(file: POSIXFile, format: StreamFormat, chunkFrames: Int) throws(AudioError) {
        path = file.path
        self.format = format
        self.file = file
        chunk = RawPCMBuffer(format: format, capacity: chunkFrames)
        let header = Self.header(format: format, dataBytes: 0)
        headerSize = header.count
        try file.write(bytes: header)
    }

    /// Appends the frames of `source` (Float32 non-interleaved, the file's channel count or mono), converting to
    /// the file's sample type with rounding and clipping. Does not allocate.
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` on a write error or when the file would exceed the 4 GiB RIFF
    ///   limit.
    public func write(_ source: BufferView) throws(AudioError) {
        precondition(!finished, "write after finish")
        let bytesPerFrame = Int64(format.bytesPerFrame)
        guard (framesWritten + Int64(source.frameCount)) * bytesPerFrame <= Self.maximumDataBytes else {
            throw AudioError(.fileIO, "'\(path)' would exceed the 4 GiB limit of a WAV file; render a shorter duration")
        }
        var done = 0
        while done < source.frameCount {
            let frames = min(chunk.capacity, source.frameCount - done)
            PCMConversion.encode(
                source.slice(from: done, frames: frames).upmixed(to: format.channelCount), into: chunk.view(frames: frames))
            try file.write(chunk.storage, count: frames * format.bytesPerFrame)
            done += frames
            // Counted chunk by chunk: after a write error (a full disk) the header covers every whole chunk written.
            framesWritten += Int64(frames)
        }
        let end = Int64(headerSize) + framesWritten * bytesPerFrame
        if end - writebackStarted >= Self.writebackBytes {
            file.startWriteback(offset: writebackStarted, count: end - writebackStarted)
            writebackStarted = end
        }
    }

    /// Rewrites the header with the sizes written so far, so the file is complete and playable up to here even if
    /// the process dies before ``finish(durably:)``. Cheap (one 44–58 byte write); recorders call it every second or
    /// so.
    public func commitHeader() throws(AudioError) {
        precondition(!finished, "commitHeader after finish")
        let dataBytes = framesWritten * Int64(format.bytesPerFrame)
        try file.write(bytes: Self.header(format: format, dataBytes: dataBytes, frames: framesWritten), at: 0)
    }

    /// Completes the header with the final sizes and closes the file.
    /// - Parameter durably: wait until the file is on the disk (`fsync`) before closing it: what a file that is
    ///   about to be renamed over another needs, so a crash cannot leave the new name on an empty file.
    public func finish(durably: Bool = false) throws(AudioError) {
        guard !finished else { return }
        finished = true
        let dataBytes = framesWritten * Int64(format.bytesPerFrame)
        // Chunks are padded to even sizes. On a full disk the pad byte may not fit: the header is still completed
        // (it needs no new space, and readers take a missing pad byte), then the error is reported.
        var padFailure: AudioError?
        if dataBytes & 1 == 1 {
            do throws(AudioError) { try file.write(bytes: [0]) } catch { padFailure = error }
        }
        try file.write(bytes: Self.header(format: format, dataBytes: dataBytes, frames: framesWritten), at: 0)
        if let padFailure {
            file.close()
            throw padFailure
        }
        if durably { try file.sync() }
        file.close()
    }

    /// Closes the file without completing it (the caller usually deletes it).
    public func abandon() {
        finished = true
        file.close()
    }

    static func header(format: StreamFormat, dataBytes: Int64, frames: Int64 = 0) -> [UInt8] {
        var h: [UInt8] = []
        func put(_ s: String) { h += Array(s.utf8) }
        func put16(_ v: Int) { h += [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF)] }
        func put32(_ v: Int64) { h += (0..<4).map { UInt8(truncatingIfNeeded: v >> (8 * $0)) } }
        let isFloat = format.sampleType == .float32
        let blockAlign = format.bytesPerFrame
        let fmtSize = isFloat ? 18 : 16
        let factSize = isFloat ? 12 : 0
        let padded = dataBytes + (dataBytes & 1)
        put("RIFF"); put32(4 + Int64(8 + fmtSize) + Int64(factSize) + 8 + padded); put("WAVE")
        put("fmt "); put32(Int64(fmtSize))
        put16(isFloat ? 3 : 1); put16(format.channelCount); put32(Int64(format.sampleRate))
        put32(Int64(format.sampleRate) * Int64(blockAlign)); put16(blockAlign); put16(format.sampleType.bitsPerSample)
        if isFloat {
            put16(0)
            put("fact"); put32(4); put32(frames)
        }
        put("data"); put32(dataBytes)
        return h
    }
}
