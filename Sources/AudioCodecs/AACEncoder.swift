import AudioCore
import CFFmpeg
import MediaContainers

/// The AAC profiles there are. LiveAudio encodes AAC-LC only: FFmpeg's native encoder accepts the HE and low-delay
/// profiles without complaint and writes broken streams, so asking for one is an error.
public enum AACProfile: String, Sendable, CaseIterable {
    /// AAC Low Complexity, `"aac-lc"`: the one profile LiveAudio encodes, and the default.
    case lc = "aac-lc"

    /// The profile named `name` (any case): `aac-lc`.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter`: for another AAC profile (`aac-main`, `he-aac`,
    ///   `he-aac-v2`, `aac-ld`, `aac-eld`) that LiveAudio encodes AAC-LC only, for any other name that it is unknown.
    public init(parsing name: String) throws(AudioError) {
        let key = name.lowercased()
        if let profile = AACProfile(rawValue: key) {
            self = profile
            return
        }
        guard Self.refused.contains(key) else {
            throw AudioError(.invalidParameter, "unknown AAC profile '\(name)'; the profile is aac-lc")
        }
        throw AudioError(
            .invalidParameter,
            "\(key) is not supported: LiveAudio encodes AAC-LC only (FFmpeg's encoder writes broken \(key) streams); ask for aac-lc")
    }

    /// The other AAC profiles, which FFmpeg's encoder takes and writes broken streams for.
    static let refused: Set<String> = ["aac-main", "he-aac", "he-aac-v2", "aac-ld", "aac-eld"]
}

/// What the encoder makes: rate, channels, bit rate, profile.
public struct AACEncoderSettings: Hashable, Sendable {
    /// The sampling rates AAC can signal (the encoder refuses others).
    public static var sampleRates: [Double] { AACSamplingFrequency.rates }
    /// The bit rates the encoder accepts, in bits per second for all channels: 32 000 … 320 000.
    public static let bitRateRange = 32_000...320_000

    /// Sample rate in Hz, of input and output alike; one of ``sampleRates``.
    public var sampleRate: Double
    /// Channels, 1 … 8.
    public var channelCount: Int
    /// Bits per second for all channels together.
    public var bitRate: Int
    /// The AAC profile; only ``AACProfile/lc`` is accepted.
    public var profile: AACProfile

    /// Creates settings; nothing is checked here (``validate()`` does, and the encoder calls it).
    /// - Parameters:
    ///   - sampleRate: the sample rate in Hz; 48 000 by default.
    ///   - channelCount: the channel count; 2 by default.
    ///   - bitRate: nil for 64 kbit/s per channel (128k stereo), within 32k…320k and what the rate carries.
    ///   - profile: the AAC profile; ``AACProfile/lc`` by default, the only one accepted.
    public init(sampleRate: Double = 48_000, channelCount: Int = 2, bitRate: Int? = nil, profile: AACProfile = .lc) {
        self.sampleRate = sampleRate
        self.channelCount = channelCount
        self.bitRate = 0
        self.profile = profile
        self.bitRate = bitRate ?? max(Self.bitRateRange.lowerBound, min(320_000, 64_000 * channelCount, maximumBitRate))
    }

    /// The highest bit rate the format carries at this rate and channel count: 6144 bits per channel per
    /// 1024-sample frame.
    public var maximumBitRate: Int { Int(6144 * sampleRate / 1024) * channelCount }

    /// Checks every field; the messages say what is allowed.
    public func validate() throws(AudioError) {
        guard Self.sampleRates.contains(sampleRate) else {
            throw AudioError(
                .unsupportedSampleRate,
                "AAC cannot carry \(formatHz(sampleRate)); use one of "
                    + Self.sampleRates.map { "\(Int($0))" }.joined(separator: ", ") + " Hz")
        }
        guard (1...8).contains(channelCount) else {
            throw AudioError(.invalidFormat, "AAC encodes 1 to 8 channels, not \(channelCount)")
        }
        guard Self.bitRateRange.contains(bitRate) else {
            throw AudioError(.invalidParameter, "the AAC bit rate must be 32k…320k bit/s, got \(bitRate)")
        }
        guard bitRate <= maximumBitRate else {
            throw AudioError(
                .invalidParameter,
                "\(bitRate / 1000)k is more than AAC carries for \(channelCount) channel(s) at \(formatHz(sampleRate)) "
                    + "(at most \(maximumBitRate / 1000)k)")
        }
    }
}

/// One encoded AAC access unit (raw, no ADTS header) and where it sits in time.
public struct AACPacket: Hashable, Sendable {
    /// Raw AAC: one access unit of 1024 samples per channel.
    public var data: [UInt8]
    /// The packet's position in the stream, from 0.
    public var index: Int
    /// The sample time of the packet's first sample on the input's clock. The encoder's first packet starts 1024
    /// samples (the priming) before the first input sample, so packet n starts at `start + n × 1024 − 1024`.
    public var sampleTime: Int64
    /// Samples the packet stands for after trimming (1024; the last packet's padding excluded). The priming
    /// packet still counts 1024: trimming the priming is the player's business (see ``AACEncoder/priming``).
    public var frames: Int
    /// The stream's sample rate in Hz, for the conversions to milliseconds.
    public var sampleRate: Double

    /// Creates a packet from its fields (the encoder makes them; a demuxer or a test may too).
    /// - Parameters:
    ///   - data: the raw AAC access unit, without an ADTS header.
    ///   - index: the packet's position in the stream, from 0.
    ///   - sampleTime: the sample time of the packet's first sample.
    ///   - frames: the samples per channel the packet stands for after trimming.
    ///   - sampleRate: the stream's sample rate in Hz.
    public init(data: [UInt8], index: Int, sampleTime: Int64, frames: Int, sampleRate: Double) {
        self.data = data
        self.index = index
        self.sampleTime = sampleTime
        self.frames = frames
        self.sampleRate = sampleRate
    }

    /// ``sampleTime`` in milliseconds.
    public var milliseconds: Double { Double(sampleTime) * 1000 / sampleRate }
    /// The decode time of packet `index` counted from the first packet, in whole milliseconds, as FLV and RTMP
    /// carry it: round(index × 1024 × 1000 / rate).
    public var streamMilliseconds: Int64 { Int64((Double(index) * 1024_000 / sampleRate).rounded()) }
}

/// AAC-LC encoding with FFmpeg's native encoder, in the manner of AudioConverter: PCM in any client format and any
/// chunk size goes in, is queued into 1024-frame frames, and comes out as packets stamped with the sample time of
/// their first sample. The same input cut into different chunks gives the same packets.
///
/// Thread safety: one thread at a time (an encoder holds FFmpeg state). Not for the real-time thread: it
/// allocates and calls the codec. Capture and render sides hand PCM to an ``AACEncodingWorker`` instead.
public final class AACEncoder: @unchecked Sendable {
    // Unchecked Sendable: FFmpeg context and staging: one thread at a time (the encoding worker's from `start`; `flush` after its join)
    /// What the encoder makes: the settings it was created with, validated.
    public let settings: AACEncoderSettings
    /// The client format ``encode(_:sampleTime:)-(RawBufferView,_)`` takes.
    public let inputFormat: StreamFormat
    /// Samples of priming (encoder delay) at the start of the stream: 1024.
    public let priming: Int
    /// Samples each packet stands for: 1024.
    public let framesPerPacket: Int
    /// The AudioSpecificConfig (ISO 14496-3 §1.6.2.1) for MP4, FLV and RTMP.
    public let audioSpecificConfig: [UInt8]
    /// The largest packet the encoder can make: 6144 bits per channel.
    public var maximumPacketSize: Int { 768 * settings.channelCount }

    /// Input frames taken so far (silence inserted for gaps included).
    public private(set) var inputFrames: Int64 = 0
    /// Frames of silence inserted for gaps in the input's sample times.
    public private(set) var gapFrames: Int64 = 0
    /// Padding after the last input sample in the last packet; known after ``flush()``.
    public private(set) var padding: Int?

    private var context: UnsafeMutablePointer<AVCodecContext>?
    private var frame: UnsafeMutablePointer<AVFrame>?
    private var packet: UnsafeMutablePointer<AVPacket>?
    /// Float32 planar staging for one packet's frames, filled across calls.
    private let pending: PCMBuffer
    private var pendingFrames = 0
    /// Converts a client chunk to Float32 planar, in pieces.
    private let conversion: PCMBuffer
    private var startSampleTime: Int64?
    private var framesSent: Int64 = 0
    private var packetsOut = 0
    private var flushed = false

    /// Creates an encoder and opens FFmpeg's native AAC encoder with `settings`.
    /// - Parameters:
    ///   - settings: what to make; validated here.
    ///   - inputFormat: the PCM that ``encode(_:sampleTime:)-(RawBufferView,_)`` takes; its rate and channel count
    ///     must match the settings (nil: Float32 non-interleaved at the settings' rate and channel count).
    /// - Throws: ``/AudioCore/AudioError`` naming what is wrong: the profile, rate, channel count, bit rate, or a
    ///   format that does not match; `.resourceUnavailable` when FFmpeg or its AAC encoder is missing.
    public init(settings: AACEncoderSettings, inputFormat: StreamFormat? = nil) throws(AudioError) {
        try settings.validate()
        let format: StreamFormat
        if let inputFormat {
            format = inputFormat
        } else {
            format = try StreamFormat.graph(sampleRate: settings.sampleRate, channelCount: settings.channelCount)
        }
        guard format.sampleRate == settings.sampleRate, format.channelCount == settings.channelCount else {
            throw AudioError(
                .formatMismatch,
                "the input is \(format.channelCount) ch at \(formatHz(format.sampleRate)) but the encoder makes "
                    + "\(settings.channelCount) ch at \(formatHz(settings.sampleRate)); resample or remix first")
        }
        self.settings = settings
        self.inputFormat = format
        try FFmpegLibraries.load()
        guard let codec = ff.avcodec_find_encoder_by_name("aac") else {
            throw AudioError(.resourceUnavailable, "this FFmpeg has no native 'aac' encoder")
        }
        guard let context = ff.avcodec_alloc_context3(codec) else {
            throw AudioError(.resourceUnavailable, "cannot allocate an AAC encoder")
        }
        self.context = context
        context.pointee.sample_fmt = AV_SAMPLE_FMT_FLTP
        context.pointee.sample_rate = Int32(settings.sampleRate)
        ff.av_channel_layout_default(&context.pointee.ch_layout, Int32(settings.channelCount))
        context.pointee.bit_rate = Int64(settings.bitRate)
        context.pointee.profile = FF_PROFILE_AAC_LOW
        context.pointee.time_base = AVRational(num: 1, den: Int32(settings.sampleRate))
        context.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER
        let opened = ff.avcodec_open2(context, codec, nil)
        guard opened >= 0 else {
            ff.avcodec_free_context(&self.context)
            throw AudioError(.invalidFormat, "FFmpeg refused the AAC settings \(settings): \(ffmpegMessage(opened))")
        }
        framesPerPacket = Int(context.pointee.frame_size)
        priming = Int(context.pointee.initial_padding)
        audioSpecificConfig =
            context.pointee.extradata_size > 0
            ? Array(UnsafeBufferPointer(start: context.pointee.extradata, count: Int(context.pointee.extradata_size)))
            : []
        frame = ff.av_frame_alloc()
        packet = ff.av_packet_alloc()
        pending = PCMBuffer(channelCount: settings.channelCount, capacity: framesPerPacket)
        conversion = PCMBuffer(channelCount: settings.channelCount, capacity: 4096)
        guard let frame else { throw AudioError(.resourceUnavailable, "cannot allocate an AVFrame") }
        frame.pointee.nb_samples = Int32(framesPerPacket)
        frame.pointee.format = AV_SAMPLE_FMT_FLTP.rawValue
        frame.pointee.sample_rate = Int32(settings.sampleRate)
        _ = ff.av_channel_layout_copy(&frame.pointee.ch_layout, &context.pointee.ch_layout)
        guard ff.av_frame_get_buffer(frame, 0) >= 0, packet != nil else {
            throw AudioError(.resourceUnavailable, "cannot allocate the encoder's frame buffers")
        }
    }

    deinit {
        ff.av_frame_free(&frame)
        ff.av_packet_free(&packet)
        ff.avcodec_free_context(&context)
    }

    /// Takes `chunk` (any number of frames, in ``inputFormat``) and returns the packets that are complete.
    /// - Parameters:
    ///   - chunk: the PCM to encode, in ``inputFormat``.
    ///   - sampleTime: the sample time of the chunk's first frame; nil continues where the last chunk
    ///     ended. The first chunk's time is the stream's start. A later time leaves a gap that is filled with
    ///     silence (counted in ``gapFrames``), so packets stay on the input's clock; an earlier one is an error.
    /// - Returns: the packets completed by this chunk, in order; often none.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidState` after ``flush()``, `.formatMismatch` for a chunk in
    ///   another format, `.invalidParameter` for a time before the end of the last chunk, `.resourceUnavailable`
    ///   when the codec fails.
    public func encode(_ chunk: RawBufferView, sampleTime: Int64? = nil) throws(AudioError) -> [AACPacket] {
        guard !flushed else { throw AudioError(.invalidState, "the encoder has been flushed; make a new one") }
        guard chunk.format == inputFormat else {
            throw AudioError(.formatMismatch, "the chunk is \(chunk.format) but the encoder takes \(inputFormat)")
        }
        var packets: [AACPacket] = []
        try place(at: sampleTime, into: &packets)
        var done = 0
        while done < chunk.frameCount {
            let n = min(conversion.capacity, chunk.frameCount - done)
            let piece = RawBufferView(
                format: chunk.format, base: chunk.base + done * chunk.format.bytesPerFrame,
                planeStride: chunk.planeStride, frameCount: n)
            let floats = conversion.view(frames: n)
            PCMConversion.decode(piece, into: floats)
            try append(floats, into: &packets)
            done += n
        }
        return packets
    }

    /// Takes Float32 planar audio at the settings' rate and channel count, whatever ``inputFormat`` is.
    public func encode(_ buffer: BufferView, sampleTime: Int64? = nil) throws(AudioError) -> [AACPacket] {
        guard buffer.channelCount == settings.channelCount else {
            throw AudioError(.formatMismatch, "the buffer has \(buffer.channelCount) channels, the encoder \(settings.channelCount)")
        }
        guard !flushed else { throw AudioError(.invalidState, "the encoder has been flushed; make a new one") }
        var packets: [AACPacket] = []
        try place(at: sampleTime, into: &packets)
        try append(buffer, into: &packets)
        return packets
    }

    /// Ends the stream: encodes what is queued (padded with silence to a whole packet) and drains the encoder.
    /// Sets ``padding``. Later calls return nothing.
    public func flush() throws(AudioError) -> [AACPacket] {
        guard !flushed else { return [] }
        flushed = true
        if startSampleTime == nil { startSampleTime = 0 }
        var packets: [AACPacket] = []
        if pendingFrames > 0 {
            pending.view(frames: framesPerPacket).slice(from: pendingFrames, frames: framesPerPacket - pendingFrames).clear()
            try sendPending(into: &packets)
        }
        let r = ff.avcodec_send_frame(context, nil)
        guard r >= 0 || r == la_averror_eof() else {
            throw AudioError(.resourceUnavailable, "the AAC encoder failed to flush: \(ffmpegMessage(r))")
        }
        try receive(into: &packets)
        let total = Int64(packetsOut) * Int64(framesPerPacket)
        padding = Int(max(0, total - Int64(priming) - inputFrames))
        return packets
    }

    // MARK: Queueing

    /// Puts the next input at `sampleTime`: the first input's time is the stream's start; a later time is a gap
    /// filled with silence; an earlier one is an error; nil continues.
    private func place(at sampleTime: Int64?, into packets: inout [AACPacket]) throws(AudioError) {
        guard let sampleTime else {
            if startSampleTime == nil { startSampleTime = 0 }
            return
        }
        guard let start = startSampleTime else {
            startSampleTime = sampleTime
            return
        }
        let expected = start + inputFrames
        if sampleTime < expected {
            throw AudioError(
                .invalidParameter,
                "the chunk starts at sample \(sampleTime), before the end of the last one (\(expected)): "
                    + "input must not go back in time")
        }
        if sampleTime > expected {
            try appendSilence(Int(sampleTime - expected), into: &packets)
            gapFrames += sampleTime - expected
        }
    }

    private func appendSilence(_ frames: Int, into packets: inout [AACPacket]) throws(AudioError) {
        var left = frames
        let silence = conversion.view(frames: min(frames, conversion.capacity))
        silence.clear()
        while left > 0 {
            let n = min(left, silence.frameCount)
            try append(silence.prefix(n), into: &packets)
            left -= n
        }
    }

    private func append(_ source: BufferView, into packets: inout [AACPacket]) throws(AudioError) {
        var done = 0
        while done < source.frameCount {
            let n = min(framesPerPacket - pendingFrames, source.frameCount - done)
            pending.view(frames: framesPerPacket).slice(from: pendingFrames, frames: n)
                .copy(from: source.slice(from: done, frames: n))
            pendingFrames += n
            done += n
            inputFrames += Int64(n)
            if pendingFrames == framesPerPacket { try sendPending(into: &packets) }
        }
    }

    /// Sends the full pending frame (the last one padded with silence) and collects what comes out.
    private func sendPending(into packets: inout [AACPacket]) throws(AudioError) {
        guard let frame, let context else { return }
        guard ff.av_frame_make_writable(frame) >= 0 else {
            throw AudioError(.resourceUnavailable, "cannot make the encoder's frame writable")
        }
        let view = pending.view(frames: framesPerPacket)
        for c in 0..<settings.channelCount {
            guard let plane = frame.pointee.extended_data[c] else { continue }
            plane.withMemoryRebound(to: Float.self, capacity: framesPerPacket) { p in
                p.update(from: view[c].baseAddress!, count: framesPerPacket)
            }
        }
        frame.pointee.pts = framesSent
        framesSent += Int64(framesPerPacket)
        pendingFrames = 0
        let r = ff.avcodec_send_frame(context, frame)
        guard r >= 0 else { throw AudioError(.resourceUnavailable, "the AAC encoder refused a frame: \(ffmpegMessage(r))") }
        try receive(into: &packets)
    }

    private func receive(into packets: inout [AACPacket]) throws(AudioError) {
        guard let context, let packet else { return }
        while true {
            let r = ff.avcodec_receive_packet(context, packet)
            if r == la_averror(EAGAIN) || r == la_averror_eof() { return }
            guard r >= 0 else { throw AudioError(.resourceUnavailable, "the AAC encoder failed: \(ffmpegMessage(r))") }
            defer { ff.av_packet_unref(packet) }
            let data = Array(UnsafeBufferPointer(start: packet.pointee.data, count: Int(packet.pointee.size)))
            let start = startSampleTime ?? 0
            let index = packetsOut
            packetsOut += 1
            // Packet n covers encoder samples n×1024 … n×1024+1023, the first `priming` of which came before the input.
            let firstSample = Int64(index) * Int64(framesPerPacket) - Int64(priming)
            let frames = Int(max(0, min(Int64(framesPerPacket), Int64(priming) + inputFrames - Int64(index) * Int64(framesPerPacket))))
            packets.append(
                AACPacket(
                    data: data, index: index, sampleTime: start + firstSample, frames: frames,
                    sampleRate: settings.sampleRate))
        }
    }
}

/// FFmpeg's message for an error code.
func ffmpegMessage(_ code: Int32) -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    _ = ff.av_strerror(code, &buffer, buffer.count)
    let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
    return String(decoding: bytes, as: UTF8.self) + " (\(code))"
}
