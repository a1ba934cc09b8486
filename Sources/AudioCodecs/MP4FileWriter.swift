import AudioCore
import CFFmpeg
import MediaContainers

/// Writes AAC packets into an MP4 (`.m4a`, `.mp4`) through libavformat's MP4 muxer, with the encoder delay
/// signalled: the first packet starts `priming` samples before zero and the last one lasts only as long as its
/// real samples, so the muxer writes an edit list (`elst` media time = priming, segment duration = the input's
/// length) and decoders that honour it give back exactly the samples that went in.
///
/// An MP4's index (`moov`) is written by ``finish()``: until then the file is not playable. `liveaudio encode`
/// and the stream session therefore catch SIGINT and SIGTERM and finish their files before exiting; ADTS and
/// FLV, written tag by tag, survive even SIGKILL.
///
/// Thread safety: one thread at a time; does file I/O.
public final class MP4FileWriter {
    /// The file being written.
    public let path: String
    /// The stream's sample rate in Hz; packet times and lengths are in samples at this rate.
    public let sampleRate: Double
    /// The stream's channel count.
    public let channelCount: Int
    /// The encoder delay in samples: the first packet starts this many samples before zero.
    public let priming: Int
    /// Packets written so far.
    public private(set) var packetsWritten = 0
    private var context: UnsafeMutablePointer<AVFormatContext>?
    private var packet: UnsafeMutablePointer<AVPacket>?
    private var streamTimeBase = AVRational(num: 1, den: 1)
    private var lastEnd: Int64?
    private var finished = false

    /// Creates (or truncates) `path` and writes the MP4 header.
    /// - Parameters:
    ///   - path: the file to write; a `.m4a` name gets the muxer's M4A (`ipod`) flavour, anything else MP4.
    ///   - sampleRate: the stream's sample rate in Hz (also the movie time scale).
    ///   - channelCount: the stream's channel count.
    ///   - bitRate: the stream's bit rate in bits per second, as the header states it.
    ///   - audioSpecificConfig: the encoder's (it goes into the `esds` box).
    ///   - priming: the encoder delay in samples (1024 for FFmpeg's AAC encoder).
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` when the file cannot be created, `.invalidFormat` when the muxer
    ///   refuses the stream, `.resourceUnavailable` when FFmpeg or its muxer cannot be set up.
    public init(
        path: String, sampleRate: Double, channelCount: Int, bitRate: Int, audioSpecificConfig: [UInt8], priming: Int
    ) throws(AudioError) {
        self.path = path
        self.sampleRate = sampleRate
        self.channelCount = channelCount
        self.priming = priming
        try FFmpegLibraries.load()
        let muxer = path.lowercased().hasSuffix(".m4a") ? "ipod" : "mp4"
        guard ff.avformat_alloc_output_context2(&context, nil, muxer, path) >= 0, let context else {
            throw AudioError(.resourceUnavailable, "cannot set up the MP4 muxer")
        }
        guard let stream = ff.avformat_new_stream(context, nil), let parameters = stream.pointee.codecpar else {
            ff.avformat_free_context(context)
            self.context = nil
            throw AudioError(.resourceUnavailable, "cannot add a stream to the MP4 muxer")
        }
        parameters.pointee.codec_type = AVMEDIA_TYPE_AUDIO
        parameters.pointee.codec_id = AV_CODEC_ID_AAC
        parameters.pointee.profile = FF_PROFILE_AAC_LOW
        parameters.pointee.sample_rate = Int32(sampleRate)
        ff.av_channel_layout_default(&parameters.pointee.ch_layout, Int32(channelCount))
        parameters.pointee.bit_rate = Int64(bitRate)
        parameters.pointee.frame_size = 1024
        parameters.pointee.initial_padding = Int32(priming)
        let padding = Int(AV_INPUT_BUFFER_PADDING_SIZE)
        if let extradata = ff.av_mallocz(audioSpecificConfig.count + padding)?.assumingMemoryBound(to: UInt8.self) {
            extradata.update(from: audioSpecificConfig, count: audioSpecificConfig.count)
            parameters.pointee.extradata = extradata
            parameters.pointee.extradata_size = Int32(audioSpecificConfig.count)
        }
        stream.pointee.time_base = AVRational(num: 1, den: Int32(sampleRate))
        let opened = ff.avio_open(&context.pointee.pb, path, AVIO_FLAG_WRITE)
        guard opened >= 0 else {
            ff.avformat_free_context(context)
            self.context = nil
            throw AudioError(.fileIO, "cannot create '\(path)': \(ffmpegMessage(opened))")
        }
        // The movie time scale at the sample rate (FFmpeg's default is 1000): the edit list then states the
        // input's length to the sample, not to the millisecond.
        var options: OpaquePointer?
        _ = ff.av_dict_set(&options, "movie_timescale", "\(Int(sampleRate))", 0)
        defer { ff.av_dict_free(&options) }
        let written = ff.avformat_write_header(context, &options)
        guard written >= 0 else {
            _ = ff.avio_closep(&context.pointee.pb)
            ff.avformat_free_context(context)
            self.context = nil
            throw AudioError(.invalidFormat, "the MP4 muxer refused the AAC stream: \(ffmpegMessage(written))")
        }
        streamTimeBase = stream.pointee.time_base
        packet = ff.av_packet_alloc()
    }

    deinit { abandon() }

    /// Appends one AAC packet: raw access unit `data` whose first sample is at `start` (samples on the encoder's
    /// clock, so the first packet is at `-priming`) and which stands for `frames` samples.
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` when the muxer fails (disk full), `.invalidParameter` for a
    ///   packet that does not follow the last one.
    public func write(_ data: [UInt8], start: Int64, frames: Int) throws(AudioError) {
        precondition(!finished, "write after finish")
        guard let context, let packet else { return }
        if let lastEnd, start < lastEnd {
            throw AudioError(.invalidParameter, "MP4 packets must follow one another: \(start) after \(lastEnd)")
        }
        guard ff.av_new_packet(packet, Int32(data.count)) >= 0 else {
            throw AudioError(.resourceUnavailable, "cannot allocate an MP4 packet")
        }
        packet.pointee.data.update(from: data, count: data.count)
        let rate = AVRational(num: 1, den: Int32(sampleRate))
        packet.pointee.pts = ff.av_rescale_q(start, rate, streamTimeBase)
        packet.pointee.dts = packet.pointee.pts
        packet.pointee.duration = ff.av_rescale_q(Int64(frames), rate, streamTimeBase)
        packet.pointee.stream_index = 0
        packet.pointee.flags = AV_PKT_FLAG_KEY
        let r = ff.av_write_frame(context, packet)
        ff.av_packet_unref(packet)
        guard r >= 0 else { throw AudioError(.fileIO, "cannot write '\(path)': \(ffmpegMessage(r))") }
        lastEnd = start + Int64(frames)
        packetsWritten += 1
    }

    /// Writes the index and closes the file: from here it is playable.
    public func finish() throws(AudioError) {
        guard !finished, let context else { return }
        finished = true
        let r = ff.av_write_trailer(context)
        _ = ff.avio_closep(&context.pointee.pb)
        ff.avformat_free_context(context)
        self.context = nil
        if packet != nil { ff.av_packet_free(&packet) }
        guard r >= 0 else { throw AudioError(.fileIO, "cannot finish '\(path)': \(ffmpegMessage(r))") }
    }

    /// Closes the file without its index (the caller deletes it).
    public func abandon() {
        guard !finished else { return }
        finished = true
        if let context {
            _ = ff.avio_closep(&context.pointee.pb)
            ff.avformat_free_context(context)
        }
        context = nil
        if packet != nil { ff.av_packet_free(&packet) }
    }
}
