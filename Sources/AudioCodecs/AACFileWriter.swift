#if canImport(Glibc)
import Glibc
import Synchronization
#endif
import AudioCore
import MediaContainers

/// The files AAC packets can go into.
public enum AACContainer: String, Sendable, CaseIterable {
    /// `.aac`: raw AAC frames, each with a 7-byte ADTS header.
    case adts
    /// `.flv`: onMetaData, the AAC sequence header and one audio tag per packet.
    case flv
    /// `.m4a` / `.mp4`: libavformat's MP4 muxer with an edit list for the encoder delay.
    case mp4

    /// The container a file name asks for: `.aac`/`.adts`, `.flv`, `.m4a`/`.mp4`; nil for anything else.
    public init?(path: String) {
        switch path.split(separator: ".").last?.lowercased() {
        case "aac", "adts": self = .adts
        case "flv": self = .flv
        case "m4a", "mp4": self = .mp4
        default: return nil
        }
    }
}

/// Writes an encoder's packets into an ADTS, FLV or MP4 file: the one place that knows what each container needs
/// (headers, the AudioSpecificConfig, millisecond timestamps, the encoder delay).
///
/// ADTS and FLV go to disk packet by packet and stay playable if the process dies; an MP4 needs
/// ``finish(inputFrames:)`` (see ``MP4FileWriter``).
///
/// Thread safety: one thread at a time (it may move between threads, e.g. into an ``AACEncodingWorker`` handler);
/// does file I/O. ``packetsWritten`` may be read from any thread.
public final class AACFileWriter: @unchecked Sendable {
    // Unchecked Sendable: container writers: the encoding worker's handler, then `finish`/`discard` after its join; `written` atomic
    /// The file being written.
    public let path: String
    /// The container written: the one asked for, or the one the file name's extension names.
    public let container: AACContainer
    /// Packets written so far; any thread may read it while another writes (a live session's statistics do; a
    /// plain counter was a data race, found by ThreadSanitizer).
    public var packetsWritten: Int { written.load(ordering: .relaxed) }
    private let written = Atomic<Int>(0)
    private let settings: AACEncoderSettings
    private let priming: Int
    private var adts: ADTSFileWriter?
    private var flv: FLVFileWriter?
    private var mp4: MP4FileWriter?
    /// The sample time the stream's first input sample had (the first packet's time plus the priming).
    private var origin: Int64?
    private var closed = false

    /// Creates (or truncates) `path` for `encoder`'s stream.
    /// - Parameters:
    ///   - path: the file to write.
    ///   - container: nil to go by the file name's extension.
    ///   - encoder: the encoder whose packets will be written; its settings, AudioSpecificConfig and priming go
    ///     into the file's headers.
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedFile` for an extension that names no AAC container,
    ///   `.fileIO`, or the container's own errors.
    public init(path: String, container: AACContainer? = nil, encoder: AACEncoder) throws(AudioError) {
        guard let kind = container ?? AACContainer(path: path) else {
            throw AudioError(
                .unsupportedFile, "cannot tell which AAC file '\(path)' should be: name it .aac, .flv, .m4a or .mp4")
        }
        self.path = path
        self.container = kind
        settings = encoder.settings
        priming = encoder.priming
        switch kind {
        case .adts:
            adts = try ADTSFileWriter(path: path, sampleRate: settings.sampleRate, channelCount: settings.channelCount)
        case .flv:
            flv = try FLVFileWriter(
                path: path, sampleRate: settings.sampleRate, channelCount: settings.channelCount,
                bitRate: settings.bitRate, audioSpecificConfig: encoder.audioSpecificConfig)
        case .mp4:
            mp4 = try MP4FileWriter(
                path: path, sampleRate: settings.sampleRate, channelCount: settings.channelCount,
                bitRate: settings.bitRate, audioSpecificConfig: encoder.audioSpecificConfig, priming: encoder.priming)
        }
    }

    deinit {
        if !closed {
            adts?.finish()
            flv?.abandon()
            mp4?.abandon()
        }
    }

    /// Appends `packets` (in order, from one encoder).
    public func write(_ packets: [AACPacket]) throws(AudioError) {
        for p in packets {
            let origin = self.origin ?? (p.sampleTime + Int64(priming) - Int64(p.index) * 1024)
            self.origin = origin
            if let adts { try adts.write(p.data) }
            if let flv { try flv.writeAAC(p.data, milliseconds: p.streamMilliseconds) }
            if let mp4 { try mp4.write(p.data, start: p.sampleTime - origin, frames: p.frames) }
            written.add(1, ordering: .relaxed)
        }
    }

    /// Completes the file: FLV gets its duration, MP4 its index.
    /// - Parameter inputFrames: the frames that went into the encoder (``AACEncoder/inputFrames``).
    public func finish(inputFrames: Int64) throws(AudioError) {
        guard !closed else { return }
        closed = true
        adts?.finish()
        try flv?.finish(duration: Double(inputFrames) / settings.sampleRate)
        try mp4?.finish()
    }

    /// Closes the file and deletes it: for a run that failed before anything worth keeping was written.
    public func discard() {
        guard !closed else { return }
        closed = true
        adts?.finish()
        flv?.abandon()
        mp4?.abandon()
        unlink(path)
    }
}
