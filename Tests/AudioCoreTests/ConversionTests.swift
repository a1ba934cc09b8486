import AudioCore
import Foundation
import Testing

func sameBytes(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, _ count: Int) -> Bool { memcmp(a, b, count) == 0 }

@Suite struct ConversionTests {
    func roundTrip(_ client: StreamFormat, fill: (RawBufferView) -> Void) throws -> (RawPCMBuffer, RawPCMBuffer, PCMBuffer) {
        let frames = 70_000
        let source = RawPCMBuffer(format: client, capacity: frames)
        fill(source.view(frames: frames))
        let graph = try StreamFormat.graph(sampleRate: client.sampleRate, channelCount: client.channelCount)
        let converter = try FormatConverter(client: client, graph: graph)
        let floats = PCMBuffer(channelCount: client.channelCount, capacity: frames)
        converter.decode(source.view(frames: frames), into: floats.view(frames: frames))
        let back = RawPCMBuffer(format: client, capacity: frames)
        converter.encode(floats.view(frames: frames), into: back.view(frames: frames))
        return (source, back, floats)
    }

    @Test(arguments: [true, false])
    func int16RoundTripIsExactForEveryValue(interleaved: Bool) throws {
        let client = try StreamFormat(sampleRate: 48_000, channelCount: 2, sampleType: .int16, interleaved: interleaved)
        let (source, back, floats) = try roundTrip(client) { view in
            for plane in 0..<client.bufferCount {
                let p = view.plane(plane).assumingMemoryBound(to: Int16.self)
                for i in 0..<(view.frameCount * client.samplesPerFrameInBuffer) { p[i] = Int16(truncatingIfNeeded: i * 7 + plane) }
            }
        }
        for plane in 0..<client.bufferCount {
            let a = source.storage + plane * source.planeStride
            let b = back.storage + plane * back.planeStride
            #expect(sameBytes(a, b, 70_000 * client.bytesPerFrame))
        }
        // −32768 maps to exactly −1.0 and every value to value/32768.
        let x = floats.view(frames: 70_000)
        let s = source.storage.assumingMemoryBound(to: Int16.self)
        let stride = interleaved ? 2 : 1
        for i in 0..<70_000 { #expect(x[0][i] == Float(s[i * stride]) / 32768) }
    }

    @Test func floatToIntegerClipsNeverWraps() throws {
        let values: [Float] = [1.0, -1.0, 1.5, -2.0, 0.5, .nan, .infinity, -.infinity, 32767.0 / 32768, 0.99999]
        let floats = PCMBuffer(channels: [values])
        for (type, maxValue, minValue) in [(SampleType.int16, 32767.0, -32768.0), (.int24, 8_388_607, -8_388_608), (.int32, 2_147_483_647, -2_147_483_648)] {
            let format = try StreamFormat(sampleRate: 48_000, channelCount: 1, sampleType: type, interleaved: true)
            let raw = RawPCMBuffer(format: format, capacity: values.count)
            PCMConversion.encode(floats.view, into: raw.view(frames: values.count))
            let decoded = (0..<values.count).map { i -> Double in
                let p = raw.storage + i * type.bytesPerSample
                switch type {
                case .int16: return Double(p.loadUnaligned(as: Int16.self))
                case .int24:
                    let v = Int32(p.load(fromByteOffset: 0, as: UInt8.self)) | Int32(p.load(fromByteOffset: 1, as: UInt8.self)) << 8
                        | Int32(Int8(bitPattern: p.load(fromByteOffset: 2, as: UInt8.self))) << 16
                    return Double(v)
                default: return Double(p.loadUnaligned(as: Int32.self))
                }
            }
            #expect(decoded[0] == maxValue, "+1.0 clips to the maximum for \(type)")
            #expect(decoded[1] == minValue)
            #expect(decoded[2] == maxValue)
            #expect(decoded[3] == minValue)
            #expect(decoded[5] == 0, "NaN becomes 0")
            #expect(decoded[6] == maxValue && decoded[7] == minValue)
            #expect(abs(decoded[4] - (maxValue + 1) / 2) <= 1)
        }
    }

    @Test func int24RoundTripIsExact() throws {
        let client = try StreamFormat(sampleRate: 48_000, channelCount: 1, sampleType: .int24, interleaved: true)
        let (source, back, floats) = try roundTrip(client) { view in
            for i in 0..<view.frameCount {
                let v = Int32(i * 239 - 8_000_000)
                let p = view.base + i * 3
                p.storeBytes(of: UInt8(truncatingIfNeeded: v), toByteOffset: 0, as: UInt8.self)
                p.storeBytes(of: UInt8(truncatingIfNeeded: v >> 8), toByteOffset: 1, as: UInt8.self)
                p.storeBytes(of: UInt8(truncatingIfNeeded: v >> 16), toByteOffset: 2, as: UInt8.self)
            }
        }
        #expect(sameBytes(source.storage, back.storage, 70_000 * 3))
        #expect(floats.view(frames: 1)[0][0] == Float(-8_000_000) / 8_388_608)
    }

    @Test func int32AndFloatRoundTrips() throws {
        // Int32 values with at most 24 significant bits survive Float32 exactly.
        let client = try StreamFormat(sampleRate: 48_000, channelCount: 2, sampleType: .int32, interleaved: false)
        let (source, back, _) = try roundTrip(client) { view in
            for plane in 0..<2 {
                let p = view.plane(plane).assumingMemoryBound(to: Int32.self)
                for i in 0..<view.frameCount { p[i] = Int32(i - 35_000) * 256 * (plane == 0 ? 1 : -1) }
            }
        }
        for plane in 0..<2 {
            let a = source.storage + plane * source.planeStride
            let b = back.storage + plane * back.planeStride
            #expect(sameBytes(a, b, 70_000 * 4))
        }
        let f = try StreamFormat(sampleRate: 48_000, channelCount: 3, sampleType: .float32, interleaved: true)
        let (fs, fb, floats) = try roundTrip(f) { view in
            let p = view.base.assumingMemoryBound(to: Float.self)
            for i in 0..<(view.frameCount * 3) { p[i] = Float(i % 1000) / 1000 - 0.5 }
        }
        #expect(sameBytes(fs.storage, fb.storage, 70_000 * 12))
        #expect(floats.view(frames: 2)[1][1] == Float(4 % 1000) / 1000 - 0.5)  // frame 1, channel 1 = sample index 4
    }

    @Test func converterRejectsMismatchedFormats() throws {
        let graph = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
        #expect(throws: AudioError.self) { try FormatConverter(client: .stereo44kInt16, graph: graph) }
        #expect(throws: AudioError.self) { try FormatConverter(client: .capture48kMonoInt16, graph: graph) }
        #expect(throws: AudioError.self) { try FormatConverter(client: graph, graph: .stereo44kInt16) }
        do {
            _ = try FormatConverter(client: .stereo44kInt16, graph: graph)
        } catch {
            #expect(error.code == .formatMismatch)
            #expect(error.message.contains("44.1 kHz") && error.message.contains("48 kHz"))
        }
    }
}
