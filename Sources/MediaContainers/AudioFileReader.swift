import AudioCore

/// Something that reads an audio file as Float32 non-interleaved frames at a fixed rate and channel count: the
/// WAV reader here, and the FFmpeg decoder in `AudioCodecs` for everything else. File players take any of them.
///
/// Thread safety: one thread at a time; reading does file I/O (and, for compressed files, decoding), so never on a
/// real-time thread.
public protocol AudioFileReader: AnyObject {
    /// The path of the file read.
    var path: String { get }
    /// The rate ``read(into:)`` delivers (after any resampling).
    var sampleRate: Double { get }
    /// The channel count ``read(into:)`` delivers.
    var channelCount: Int { get }
    /// The frames ``read(into:)`` delivers in all, as far as the file says; see ``isFrameCountExact``.
    var frameCount: Int64 { get }
    /// False when ``frameCount`` is an estimate (an MP3 or ADTS file without an index gives only a bit-rate guess).
    var isFrameCountExact: Bool { get }
    /// Reads up to `destination.frameCount` frames into `destination` (``channelCount`` channels); returns how
    /// many, fewer only at the end, 0 after it.
    func read(into destination: BufferView) throws(AudioError) -> Int
    /// Moves to `frame` (counted at ``sampleRate`` from the start); clamped to the file.
    func seek(toFrame frame: Int64) throws(AudioError)
}

extension AudioFileReader {
    /// ``frameCount`` in seconds.
    public var duration: Double { Double(frameCount) / sampleRate }
}

extension WAVFileReader: AudioFileReader {
    public var sampleRate: Double { info.format.sampleRate }
    public var channelCount: Int { info.format.channelCount }
    public var isFrameCountExact: Bool { true }
}

/// The first bytes of a file, for telling formats apart before opening it properly.
public enum AudioFileHead {
    /// Up to `count` bytes from the start of `path`.
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` for a missing or unreadable file or a directory, `.corruptFile`
    ///   for an empty one.
    public static func read(path: String, count: Int = 12) throws(AudioError) -> [UInt8] {
        let file = try POSIXFile(path: path, writing: false)
        guard file.size > 0 else { throw AudioError(.corruptFile, "'\(path)' is empty") }
        return try file.readBytes(count: count, at: 0)
    }
}
