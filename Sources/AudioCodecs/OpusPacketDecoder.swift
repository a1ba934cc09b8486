import AudioCore
import CFFmpeg

/// Decodes Opus packets (RFC 6716) one at a time, as they come from a phone's WebCodecs `AudioEncoder`, through
/// FFmpeg's Opus decoder: 48 kHz, mono or stereo in, mono out (a stereo packet's channels averaged).
///
/// <!-- sample: packet: [UInt8] -->
/// ```swift
/// let decoder = try OpusPacketDecoder(channelCount: 1)
/// let samples = try decoder.decode(packet)   // 960 samples for a 20 ms packet
/// ```
///
/// No container and no `OpusHead`: the stream's pre-skip (the encoder's look-ahead, 312 frames from libopus) is not
/// dropped here — the first packet's first frames are the encoder's warm-up — and the caller places what it decodes
/// knowing it ( ``preSkip`` given).
///
/// Thread safety: one thread at a time.
public final class OpusPacketDecoder: @unchecked Sendable {
    // Unchecked Sendable: FFmpeg's context and frame, one thread at a time as documented.
    /// The rate of what it decodes: 48 kHz.
    public static let sampleRate = 48_000
    /// The channels the packets carry.
    public let channelCount: Int
    /// The stream's pre-skip in frames (what the encoder's look-ahead puts before the first input frame), as told.
    public let preSkip: Int
    private var context: UnsafeMutablePointer<AVCodecContext>?
    private var packet: UnsafeMutablePointer<AVPacket>?
    private var frame: UnsafeMutablePointer<AVFrame>?

    /// A decoder for packets of `channelCount` channels (1 or 2).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for another count or a pre-skip out of 0 … 48000,
    ///   `.resourceUnavailable` when FFmpeg is missing or has no Opus decoder.
    public init(channelCount: Int, preSkip: Int = 312) throws(AudioError) {
        guard channelCount == 1 || channelCount == 2 else {
            throw AudioError(.invalidParameter, "an Opus decoder for \(channelCount) channels: 1 or 2")
        }
        guard (0...48_000).contains(preSkip) else { throw AudioError(.invalidParameter, "an Opus pre-skip of \(preSkip) frames: 0 … 48000") }
        self.channelCount = channelCount
        self.preSkip = preSkip
        try FFmpegLibraries.load()
        guard let codec = ff.avcodec_find_decoder_by_name("opus") ?? ff.avcodec_find_decoder_by_name("libopus") else {
            throw AudioError(.resourceUnavailable, "this FFmpeg has no Opus decoder")
        }
        guard let made = ff.avcodec_alloc_context3(codec) else { throw AudioError(.resourceUnavailable, "cannot allocate an Opus decoder") }
        context = made
        made.pointee.sample_rate = Int32(Self.sampleRate)
        ff.av_channel_layout_default(&made.pointee.ch_layout, Int32(channelCount))
        let opened = ff.avcodec_open2(made, codec, nil)
        guard opened >= 0 else {
            ff.avcodec_free_context(&context)
            throw AudioError(.resourceUnavailable, "FFmpeg's Opus decoder did not open: \(ffmpegMessage(opened))")
        }
        packet = ff.av_packet_alloc()
        frame = ff.av_frame_alloc()
        guard packet != nil, frame != nil else {
            ff.avcodec_free_context(&context)
            ff.av_packet_free(&packet)
            ff.av_frame_free(&frame)
            throw AudioError(.resourceUnavailable, "cannot allocate an Opus decoder's buffers")
        }
    }

    deinit {
        ff.av_frame_free(&frame)
        ff.av_packet_free(&packet)
        ff.avcodec_free_context(&context)
    }

    /// Decodes one packet to mono samples at 48 kHz.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidFormat` for an empty or damaged packet, or one whose frames
    ///   are not in 1 … 5760 (120 ms).
    public func decode(_ bytes: [UInt8]) throws(AudioError) -> [Float] {
        guard !bytes.isEmpty, bytes.count <= 65_536, let packet, let frame, let context else {
            throw AudioError(.invalidFormat, "an Opus packet of \(bytes.count) bytes")
        }
        guard ff.av_new_packet(packet, Int32(bytes.count)) >= 0 else { throw AudioError(.resourceUnavailable, "cannot allocate a packet") }
        defer { ff.av_packet_unref(packet) }
        bytes.withUnsafeBufferPointer { packet.pointee.data.update(from: $0.baseAddress!, count: bytes.count) }
        let sent = ff.avcodec_send_packet(context, packet)
        guard sent >= 0 else { throw AudioError(.invalidFormat, "a damaged Opus packet: \(ffmpegMessage(sent))") }
        var out: [Float] = []
        while true {
            let got = ff.avcodec_receive_frame(context, frame)
            if got == la_averror(EAGAIN) || got == la_averror_eof() { break }
            guard got >= 0 else { throw AudioError(.invalidFormat, "a damaged Opus packet: \(ffmpegMessage(got))") }
            defer { ff.av_frame_unref(frame) }
            let n = Int(frame.pointee.nb_samples), channels = Int(frame.pointee.ch_layout.nb_channels)
            guard n >= 0, n + out.count <= 5760, channels >= 1 else {
                throw AudioError(.invalidFormat, "an Opus packet of more than 120 ms")
            }
            let format = AVSampleFormat(rawValue: frame.pointee.format)
            let scale = 1 / Float(channels)
            for i in 0..<n {
                var sum: Float = 0
                for c in 0..<channels {
                    switch format {
                    case AV_SAMPLE_FMT_FLTP: sum += frame.pointee.extended_data[c]!.withMemoryRebound(to: Float.self, capacity: n) { $0[i] }
                    case AV_SAMPLE_FMT_FLT: sum += frame.pointee.extended_data[0]!.withMemoryRebound(to: Float.self, capacity: n * channels) { $0[i * channels + c] }
                    case AV_SAMPLE_FMT_S16: sum += Float(frame.pointee.extended_data[0]!.withMemoryRebound(to: Int16.self, capacity: n * channels) { $0[i * channels + c] }) / 32_768
                    case AV_SAMPLE_FMT_S16P: sum += Float(frame.pointee.extended_data[c]!.withMemoryRebound(to: Int16.self, capacity: n) { $0[i] }) / 32_768
                    default: break
                    }
                }
                out.append(sum * scale)
            }
        }
        guard !out.isEmpty else { throw AudioError(.invalidFormat, "an Opus packet that decoded to nothing") }
        return out
    }
}
