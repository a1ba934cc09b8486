#if canImport(Glibc)
import Glibc
#endif
import AudioCore
import CFFmpeg
import MediaContainers

/// Reads any audio file FFmpeg reads — MP3, AAC (ADTS), M4A/MP4, FLAC, WAV, Ogg (Vorbis, Opus, FLAC), FLV — as
/// Float32 non-interleaved frames, resampled to the rate asked for (libswresample).
///
/// Encoder delay is trimmed the way the container signals it: an MP4 edit list, the LAME header of an MP3, Opus
/// pre-skip. Where the container states the exact length (WAV, FLAC, MP4, Ogg) the output stops there, so an
/// MP4's end padding is trimmed too. Containers that signal nothing (ADTS, FLV) decode as they are: their AAC
/// starts with 1024 samples of priming.
///
/// FFmpeg's decoders carry on over damaged data; this reader does not: a packet the decoder rejects is an error
/// that says where it was, so a damaged file never passes for a good one.
///
/// Thread safety: one thread at a time. Decoding allocates: use it from a reader thread (the read-ahead of
/// AudioUnits' `FileSourceUnit`) or offline, never on a real-time thread.
public final class AudioFileDecoder: AudioFileReader, @unchecked Sendable {
    // Unchecked Sendable: one thread at a time (read-ahead worker or offline caller): `session`, `position`, `reopenFailure`
    /// The file being read; a seek opens it again by this path.
    public let path: String
    /// The rate ``read(into:)`` delivers.
    public let sampleRate: Double
    /// The channel count ``read(into:)`` delivers.
    public let channelCount: Int
    public let frameCount: Int64
    public let isFrameCountExact: Bool
    /// What the file holds.
    public let source: AudioFileDescription

    private var session: DecodeSession
    /// Why the last seek could not reopen the file; reads fail with it until a seek succeeds.
    private var reopenFailure: AudioError?
    /// Frames delivered since the start.
    public private(set) var position: Int64 = 0

    /// Opens `path`.
    /// - Parameters:
    ///   - path: the file to read.
    ///   - sampleRate: the rate to deliver (nil: the file's).
    ///   - channelCount: the channel count to deliver (nil: the file's). Mono goes to every channel; other
    ///     counts are remixed with FFmpeg's standard downmix/upmix coefficients.
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` (missing or unreadable), `.unsupportedFile` (not audio FFmpeg
    ///   knows), `.corruptFile` (a damaged header), `.invalidFormat` / `.unsupportedSampleRate` for an output format
    ///   that cannot be.
    public init(path: String, sampleRate: Double? = nil, channelCount: Int? = nil) throws(AudioError) {
        self.path = path
        try AudioFile.validate(path: path)
        let session = try DecodeSession(path: path, sampleRate: sampleRate, channelCount: channelCount)
        self.session = session
        source = session.description
        self.sampleRate = session.outputRate
        self.channelCount = session.outputChannels
        isFrameCountExact = session.lengthIsExact
        frameCount = session.outputFrames
    }

    /// Reads up to `destination.frameCount` frames; fewer only at the end.
    /// - Throws: ``/AudioCore/AudioError`` `.corruptFile` when the decoder rejects a packet (damaged data),
    ///   `.fileIO`.
    public func read(into destination: BufferView) throws(AudioError) -> Int {
        precondition(destination.channelCount == channelCount, "the destination must have \(channelCount) channels")
        if let reopenFailure { throw reopenFailure }
        var done = 0
        while done < destination.frameCount {
            if isFrameCountExact, position >= frameCount { break }
            var want = destination.frameCount - done
            if isFrameCountExact { want = Int(min(Int64(want), frameCount - position)) }
            let got = try session.read(into: destination.slice(from: done, frames: want))
            if got == 0 { break }
            done += got
            position += Int64(got)
        }
        return done
    }

    /// Moves to `frame` exactly: the file is opened again and decoded up to there (cheap for the usual seek to 0,
    /// proportional to `frame` otherwise).
    public func seek(toFrame frame: Int64) throws(AudioError) {
        do throws(AudioError) {
            session = try DecodeSession(path: path, sampleRate: sampleRate, channelCount: channelCount)
        } catch {
            // The file went away or changed: later reads report it instead of going on from the old place.
            reopenFailure = error
            throw error
        }
        reopenFailure = nil
        position = 0
        var left = max(0, frame)
        let scratch = PCMBuffer(channelCount: channelCount, capacity: 4096)
        while left > 0 {
            let got = try read(into: scratch.view(frames: Int(min(left, 4096))))
            if got == 0 { break }
            left -= Int64(got)
        }
    }
}

/// What an audio file holds, as FFmpeg sees it.
public struct AudioFileDescription: Hashable, Sendable {
    /// FFmpeg's container name: "wav", "mp3", "mov,mp4,m4a,3gp,3g2,mj2", "flac", "ogg", "aac", "flv".
    public var container: String
    /// FFmpeg's codec name: "pcm_s16le", "mp3", "aac", "flac", "vorbis", "opus".
    public var codec: String
    /// For AAC: "LC", "HE-AAC", … as FFmpeg names the profile; nil otherwise.
    public var profile: String?
    /// The file's sample rate in Hz, before any resampling.
    public var sampleRate: Double
    /// The file's channel count, before any remixing.
    public var channelCount: Int
    /// Bits per second as the file states or FFmpeg estimates; 0 when unknown.
    public var bitRate: Int
    /// Seconds, as the container states or FFmpeg estimates.
    public var duration: Double
}

/// One opening of a file: the demuxer, the decoder and the resampler.
final class DecodeSession {
    let description: AudioFileDescription
    let outputRate: Double
    let outputChannels: Int
    let lengthIsExact: Bool
    let outputFrames: Int64
    private let path: String
    private var format: UnsafeMutablePointer<AVFormatContext>?
    private var codec: UnsafeMutablePointer<AVCodecContext>?
    private var resampler: OpaquePointer?
    private var packet: UnsafeMutablePointer<AVPacket>?
    private var frame: UnsafeMutablePointer<AVFrame>?
    private let streamIndex: Int32
    private let timeBase: AVRational
    /// Resampled frames waiting to be read.
    private var staging: PCMBuffer
    private var stagedStart = 0
    private var stagedEnd = 0
    /// The resampler's channel count (the file's, or the output's when remixing).
    private let resampledChannels: Int
    private var demuxerDone = false
    private var decoderDone = false
    private var resamplerDone = false

    /// Containers whose stated length is the exact decoded length.
    static let exactContainers = ["wav", "flac", "ogg", "mov,mp4,m4a,3gp,3g2,mj2", "w64", "aiff", "caf"]

    init(path: String, sampleRate: Double?, channelCount: Int?) throws(AudioError) {
        self.path = path
        _ = try AudioFileHead.read(path: path, count: 0)  // missing, a directory, empty: a clear error first
        try FFmpegLibraries.load()
        // A throw below leaves the object half made, and the deinit of a half-made object does not run: what was
        // opened is freed here (every damaged file leaked its demuxer and decoder — found by the fuzz targets'
        // leak check).
        // Until then the handles are local (self cannot be used before its constants are set).
        var openedFormat: UnsafeMutablePointer<AVFormatContext>?
        var openedCodec: UnsafeMutablePointer<AVCodecContext>?
        var openedResampler: OpaquePointer?
        var openedPacket: UnsafeMutablePointer<AVPacket>?
        var openedFrame: UnsafeMutablePointer<AVFrame>?
        var complete = false
        defer { if !complete { Self.free(&openedFormat, &openedCodec, &openedResampler, &openedPacket, &openedFrame) } }
        var opened = ff.avformat_open_input(&openedFormat, path, nil, nil)
        guard opened >= 0, let format = openedFormat else {
            throw AudioError(
                opened == la_averror(EACCES) ? .fileIO : .unsupportedFile,
                "'\(path)' is not an audio file FFmpeg can read: \(ffmpegMessage(opened))")
        }
        opened = ff.avformat_find_stream_info(format, nil)
        guard opened >= 0 else {
            throw AudioError(.corruptFile, "'\(path)': cannot read the streams: \(ffmpegMessage(opened))")
        }
        var decoder: UnsafePointer<AVCodec>?
        let index = ff.av_find_best_stream(format, AVMEDIA_TYPE_AUDIO, -1, -1, &decoder, 0)
        guard index >= 0, let decoder, let stream = format.pointee.streams[Int(index)] else {
            let containerName = String(cString: format.pointee.iformat.pointee.name)
            throw AudioError(
                .unsupportedFile,
                index == la_averror_decoder_not_found()
                    ? "'\(path)' (\(containerName)): this FFmpeg has no decoder for its audio"
                    : "'\(path)' (\(containerName)) has no audio stream")
        }
        streamIndex = index
        timeBase = stream.pointee.time_base
        guard let context = ff.avcodec_alloc_context3(decoder) else {
            throw AudioError(.resourceUnavailable, "cannot allocate a decoder")
        }
        openedCodec = context
        _ = ff.avcodec_parameters_to_context(context, stream.pointee.codecpar)
        context.pointee.pkt_timebase = stream.pointee.time_base
        opened = ff.avcodec_open2(context, decoder, nil)
        guard opened >= 0 else {
            throw AudioError(.corruptFile, "'\(path)': the decoder refused the stream: \(ffmpegMessage(opened))")
        }
        let inRate = Int(context.pointee.sample_rate)
        let inChannels = Int(context.pointee.ch_layout.nb_channels)
        guard inRate > 0, inChannels > 0 else {
            throw AudioError(.corruptFile, "'\(path)': the audio stream has no sample rate or channel count")
        }
        let container = String(cString: format.pointee.iformat.pointee.name)
        let profileName = ff.avcodec_profile_name(context.pointee.codec_id, context.pointee.profile).map { String(cString: $0) }
        let rateOut = sampleRate ?? Double(inRate)
        let channelsOut = channelCount ?? inChannels
        guard rateOut >= 1000, rateOut <= 768_000, rateOut == rateOut.rounded() else {
            throw AudioError(.unsupportedSampleRate, "cannot decode to \(formatHz(rateOut)): use 1000…768000 Hz, whole")
        }
        guard (1...64).contains(channelsOut) else {
            throw AudioError(.invalidFormat, "cannot decode to \(channelsOut) channels: use 1…64")
        }
        outputRate = rateOut
        outputChannels = channelsOut
        // Mono to many is copied after resampling; any other change of count is FFmpeg's remix.
        resampledChannels = inChannels == 1 ? 1 : channelsOut

        // The length: the stream's when stated, else the container's. Damaged metadata can state anything (a
        // zero time base, a length of centuries), so what it adds up to is checked before it becomes a count.
        guard timeBase.num > 0, timeBase.den > 0 else {
            throw AudioError(.corruptFile, "'\(path)': the audio stream's time base \(timeBase.num)/\(timeBase.den) is not valid")
        }
        var seconds = 0.0
        if stream.pointee.duration != Int64.min, stream.pointee.duration > 0 {
            seconds = Double(stream.pointee.duration) * Double(timeBase.num) / Double(timeBase.den)
        } else if format.pointee.duration != Int64.min, format.pointee.duration > 0 {
            seconds = Double(format.pointee.duration) / Double(AV_TIME_BASE)
        }
        let exact =
            Self.exactContainers.contains(container) && stream.pointee.duration != Int64.min
            && stream.pointee.duration > 0
        lengthIsExact = exact
        // Exact lengths in the stream's time base, rescaled to the output rate and rounded to the nearest frame.
        let frames =
            exact ? Double(stream.pointee.duration) * Double(timeBase.num) * rateOut / Double(timeBase.den) : seconds * rateOut
        guard let count = Self.frameCount(frames) else {
            throw AudioError(
                .corruptFile,
                "'\(path)' states a length of \(seconds) s, which no audio file has: its header is damaged")
        }
        outputFrames = count
        description = AudioFileDescription(
            container: container, codec: String(cString: decoder.pointee.name), profile: profileName,
            sampleRate: Double(inRate), channelCount: inChannels,
            bitRate: Int(context.pointee.bit_rate > 0 ? context.pointee.bit_rate : format.pointee.bit_rate),
            duration: seconds)

        var inLayout = AVChannelLayout()
        if context.pointee.ch_layout.order == AV_CHANNEL_ORDER_UNSPEC {
            ff.av_channel_layout_default(&inLayout, Int32(inChannels))
        } else {
            _ = ff.av_channel_layout_copy(&inLayout, &context.pointee.ch_layout)
        }
        defer { ff.av_channel_layout_uninit(&inLayout) }
        var outLayout = AVChannelLayout()
        ff.av_channel_layout_default(&outLayout, Int32(resampledChannels))
        defer { ff.av_channel_layout_uninit(&outLayout) }
        guard
            ff.swr_alloc_set_opts2(
                &openedResampler, &outLayout, AV_SAMPLE_FMT_FLTP, Int32(rateOut), &inLayout, context.pointee.sample_fmt,
                Int32(inRate), 0, nil) >= 0, openedResampler != nil
        else { throw AudioError(.resourceUnavailable, "cannot set up the resampler") }
        let initialized = ff.swr_init(openedResampler)
        guard initialized >= 0 else {
            throw AudioError(
                .invalidFormat,
                "cannot convert \(inChannels) ch at \(inRate) Hz to \(resampledChannels) ch at \(Int(rateOut)) Hz: "
                    + ffmpegMessage(initialized))
        }
        openedPacket = ff.av_packet_alloc()
        openedFrame = ff.av_frame_alloc()
        guard openedPacket != nil, openedFrame != nil else { throw AudioError(.resourceUnavailable, "cannot allocate a packet") }
        staging = PCMBuffer(channelCount: resampledChannels, capacity: 8192)
        (self.format, codec, resampler, packet, frame) = (openedFormat, openedCodec, openedResampler, openedPacket, openedFrame)
        complete = true
    }

    deinit { Self.free(&format, &codec, &resampler, &packet, &frame) }

    private static func free(
        _ format: inout UnsafeMutablePointer<AVFormatContext>?, _ codec: inout UnsafeMutablePointer<AVCodecContext>?,
        _ resampler: inout OpaquePointer?, _ packet: inout UnsafeMutablePointer<AVPacket>?, _ frame: inout UnsafeMutablePointer<AVFrame>?
    ) {
        ff.swr_free(&resampler)
        ff.av_frame_free(&frame)
        ff.av_packet_free(&packet)
        ff.avcodec_free_context(&codec)
        ff.avformat_close_input(&format)
    }

    /// The most frames a stated length may come to: 2⁴⁰, over 260 days at 48 kHz.
    static let maximumStatedFrames: Int64 = 1 << 40

    /// `frames` rounded to a whole count, or nil when it is not a number or beyond ``maximumStatedFrames``.
    static func frameCount(_ frames: Double) -> Int64? {
        guard frames.isFinite, frames >= 0, frames <= Double(maximumStatedFrames) else { return nil }
        return Int64(frames.rounded())
    }

    /// Fills `destination` from the staging buffer, decoding more as needed; 0 at the end.
    func read(into destination: BufferView) throws(AudioError) -> Int {
        var done = 0
        while done < destination.frameCount {
            if stagedStart == stagedEnd {
                guard try refill() else { break }
                continue
            }
            let n = min(destination.frameCount - done, stagedEnd - stagedStart)
            let from = staging.view(frames: stagedEnd).slice(from: stagedStart, frames: n)
            let to = destination.slice(from: done, frames: n)
            if resampledChannels == destination.channelCount {
                to.copy(from: from)
            } else {
                for c in 0..<destination.channelCount {
                    to[c].baseAddress!.update(from: from[0].baseAddress!, count: n)
                }
            }
            stagedStart += n
            done += n
        }
        return done
    }

    /// Decodes and resamples the next frame into the staging buffer; false at the end of everything.
    private func refill() throws(AudioError) -> Bool {
        stagedStart = 0
        stagedEnd = 0
        while stagedEnd == 0 {
            if resamplerDone { return false }
            if decoderDone {
                // Drain the resampler's delay line.
                try convert(nil, count: 0)
                if stagedEnd == 0 { resamplerDone = true }
                continue
            }
            guard let frame, let codec else { return false }
            let received = ff.avcodec_receive_frame(codec, frame)
            if received >= 0 {
                defer { ff.av_frame_unref(frame) }
                let input = UnsafeMutableRawPointer(frame.pointee.extended_data)?
                    .assumingMemoryBound(to: UnsafePointer<UInt8>?.self)
                try convert(input, count: Int(frame.pointee.nb_samples))
                continue
            }
            if received == la_averror_eof() {
                decoderDone = true
                continue
            }
            guard received == la_averror(EAGAIN) else { throw damaged(received) }
            try feed()
        }
        return true
    }

    /// Sends the next packet of the audio stream to the decoder (or the end of stream).
    private func feed() throws(AudioError) {
        guard let format, let packet, let codec else { return }
        if demuxerDone { return }
        while true {
            let r = ff.av_read_frame(format, packet)
            if r == la_averror_eof() {
                demuxerDone = true
                _ = ff.avcodec_send_packet(codec, nil)
                return
            }
            guard r >= 0 else {
                if r == la_averror(EIO) { throw AudioError(.fileIO, "cannot read '\(path)': \(ffmpegMessage(r))") }
                throw AudioError(.corruptFile, "'\(path)' is damaged near byte \(ff.avio_seek(format.pointee.pb, 0, SEEK_CUR)): \(ffmpegMessage(r))")
            }
            defer { ff.av_packet_unref(packet) }
            guard packet.pointee.stream_index == streamIndex else { continue }
            let sent = ff.avcodec_send_packet(codec, packet)
            guard sent >= 0 else { throw damaged(sent) }
            return
        }
    }

    private func damaged(_ code: Int32) -> AudioError {
        var at = ""
        if let pts = packet?.pointee.pts, pts != Int64.min {
            let seconds = Double(pts) * Double(timeBase.num) / Double(timeBase.den)
            if seconds.isFinite { at = " at \((seconds * 1000).rounded() / 1000) s" }
        }
        let codecName = description.codec
        return AudioError(.corruptFile, "'\(path)' is damaged\(at): the \(codecName) decoder says \(ffmpegMessage(code))")
    }

    /// Resamples `count` input frames (nil: drains) into the staging buffer.
    private func convert(_ input: UnsafeMutablePointer<UnsafePointer<UInt8>?>?, count: Int) throws(AudioError) {
        let needed = Int(ff.swr_get_out_samples(resampler, Int32(count)))
        if needed > staging.capacity {
            staging = PCMBuffer(channelCount: resampledChannels, capacity: needed + 1024)
        }
        var planes = (0..<resampledChannels).map { c -> UnsafeMutablePointer<UInt8>? in
            UnsafeMutableRawPointer(staging.view(frames: staging.capacity)[c].baseAddress!).assumingMemoryBound(to: UInt8.self)
        }
        let got = planes.withUnsafeMutableBufferPointer { p in
            ff.swr_convert(resampler, p.baseAddress, Int32(staging.capacity), input, Int32(count))
        }
        guard got >= 0 else {
            throw AudioError(.corruptFile, "'\(path)': the resampler failed: \(ffmpegMessage(got))")
        }
        stagedStart = 0
        stagedEnd = Int(got)
    }
}

/// Opening audio files for reading, whatever they are.
public enum AudioFile {
    /// A reader for `path`: WAV files LiveAudio reads itself (when no resampling is asked for), anything else
    /// through FFmpeg (``AudioFileDecoder``).
    /// - Parameters:
    ///   - path: the file to read.
    ///   - sampleRate: the rate to deliver (nil: the file's).
    ///   - channelCount: the channel count to deliver (nil: the file's).
    /// - Returns: a reader positioned at the file's first frame.
    /// - Throws: ``/AudioCore/AudioError``: `.fileIO`, `.unsupportedFile`, `.corruptFile` (damaged WAV headers are
    ///   reported as such, not passed on to FFmpeg).
    public static func open(path: String, sampleRate: Double? = nil, channelCount: Int? = nil) throws(AudioError)
        -> any AudioFileReader & Sendable
    {
        do throws(AudioError) {
            let wav = try WAVFileReader(path: path)
            if (sampleRate == nil || sampleRate == wav.sampleRate) && (channelCount == nil || channelCount == wav.channelCount) {
                return wav
            }
        } catch where error.code == .unsupportedFile {
            // Not a WAV file (or a WAV encoding LiveAudio does not read itself): FFmpeg's turn.
        }
        return try AudioFileDecoder(path: path, sampleRate: sampleRate, channelCount: channelCount)
    }
}
