// ear-monitor: the microphone in your headphones within a few milliseconds, through a unit of your own
// (SoftClipUnit), a reverb and a limiter — what a singer hears while singing.
//
//   swift run ear-monitor [alsa|jack] [SECONDS]          (defaults: alsa, 10 s; Ctrl-C stops it sooner)
//
// ALSA's "default" device is PulseAudio or PipeWire on most desktops; with `jack`, a JACK server must be running.
// Wear headphones: through speakers, the microphone hears itself.
import Foundation
import LiveAudio

let arguments = CommandLine.arguments.dropFirst()
let backend = arguments.first.flatMap(DeviceBackend.init(rawValue:)) ?? .alsa
let seconds = arguments.dropFirst().first.flatMap(Double.init) ?? 10

do {
    let voice = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
    let stereo = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
    // 128 frames × 2 periods: 2.7 ms a period at 48 kHz. The grant says what the device really gave.
    let io = try IOUnit(.init(backend: backend, inputFormat: voice, outputFormat: stereo, periodFrames: 128,
                              periodCount: 2))

    // As large as any period a device may grant (a JACK server at -p 2048 decides its own).
    let graph = try RenderGraph(format: stereo, maximumFrames: DeviceRequest.maximumPeriodFrames)
    let microphone = try graph.addNode(io.inputUnit(), name: "input")
    let clip = try graph.addNode(SoftClipUnit(format: voice, driveDecibels: 6), name: "softClip")
    let room = try graph.addNode(ReverbUnit(format: stereo, inputChannelCount: 1), name: "room")
    let limiter = try graph.addNode(LimiterUnit(format: stereo), name: "limiter")
    try graph.connect(microphone, to: clip)
    try graph.connect(clip, to: room)
    try graph.connect(room, to: limiter)
    try graph.connect(limiter, to: graph.output)
    try graph.unit(room).setParameter("wetDryMix", 20)
    try io.setOutputGraph(graph)

    let grant = try io.start()
    print("monitoring: \(grant)")
    let deviceFrames = grant.inputLatencyFrames + grant.outputLatencyFrames
    print("device latency: \(String(format: "%.1f", Double(deviceFrames) / grant.sampleRate * 1000)) ms in + out, "
        + "as the backend reports it")
    // Device events (xruns, faults, reconnects) arrive on an AsyncStream; read them off the device's thread.
    let events = Task { for await event in io.events { print(event) } }
    // Until the time is up or Ctrl-C: stop the device either way, so it is closed as it should be.
    signal(SIGINT, SIG_IGN)
    let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
    let (interrupted, interruption) = AsyncStream.makeStream(of: Void.self)
    interrupt.setEventHandler { interruption.yield() }
    interrupt.resume()
    await withTaskGroup(of: Void.self) { group in
        group.addTask { try? await Task.sleep(for: .seconds(seconds)) }
        group.addTask { for await _ in interrupted { return } }
        await group.next()
        group.cancelAll()
    }
    interrupt.cancel()
    io.stop()
    events.cancel()
} catch {
    print("ear-monitor: \(error)")
    exit(1)
}
