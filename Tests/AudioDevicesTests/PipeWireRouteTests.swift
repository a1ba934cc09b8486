@testable import AudioDevices
import CPipeWire
import Testing

/// A card's port changing under a node (headphones plugged into a laptop whose speakers played): what PipeWire
/// reports as the card device's active route (SPA_PARAM_Route). Null sinks have no card, so the servers of the other
/// tests cannot show it; here, a Route param written the way ALSA's card profiles write it is read back, and the
/// observation turns a route that changed under the same node into a `portChanged` event.
@Suite struct PipeWireRouteTests {
    static func route(device: Int32, output: Bool, name: String, description: String, type: String) -> la_pw_route {
        var r = la_pw_route()
        r.index = 3
        r.device = device
        r.output = output ? 1 : 0
        r.available = 2
        set(&r.name, name)
        set(&r.description, description)
        set(&r.port_type, type)
        return r
    }

    static func set<T>(_ field: inout T, _ value: String) {
        withUnsafeMutableBytes(of: &field) { bytes in
            bytes.initializeMemory(as: UInt8.self, repeating: 0)
            for (i, b) in value.utf8.prefix(bytes.count - 1).enumerated() { bytes[i] = b }
        }
    }

    static func text<T>(_ field: T) -> String {
        withUnsafeBytes(of: field) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
    }

    /// A Route param as a card sends it — index, direction, device, name, description, availability, and the info's
    /// `port.type` among other keys — reads back field for field; one without a port type reads with none; bytes that
    /// are not a Route object, or are cut short, are refused.
    @Test func aRouteParamReadsBack() {
        var buffer = [UInt8](repeating: 0, count: 1024)
        for original in [
            Self.route(device: 1, output: true, name: "analog-output-headphones", description: "Headphones", type: "headphones"),
            Self.route(device: 0, output: false, name: "analog-input-mic", description: "Microphone", type: ""),
        ] {
            var r = original
            let size = buffer.withUnsafeMutableBytes { la_pw_build_route($0.baseAddress, $0.count, &r) }
            #expect(size > 64)
            var read = la_pw_route()
            let status = buffer.withUnsafeBytes { la_pw_parse_route($0.baseAddress, size, &read) }
            #expect(status == 0)
            #expect(read.index == 3 && read.device == original.device && read.output == original.output && read.available == 2)
            #expect(Self.text(read.name) == Self.text(original.name) && Self.text(read.description) == Self.text(original.description))
            #expect(Self.text(read.port_type) == Self.text(original.port_type))
            var cut = la_pw_route()
            #expect(buffer.withUnsafeBytes { la_pw_parse_route($0.baseAddress, size - 8, &cut) } == -1)
        }
        var nothing = la_pw_route()
        let garbage = [UInt8](repeating: 0x5a, count: 64)
        #expect(garbage.withUnsafeBytes { la_pw_parse_route($0.baseAddress, $0.count, &nothing) } == -1)
    }

    static func status(peer: String, port: String, type: String, formFactor: String = "") -> la_pw_status {
        var s = la_pw_status()
        s.output.node_id = 40
        s.output.peer_id = 41
        s.output.state = Int32(LA_PW_STATE_STREAMING)
        set(&s.output.peer_name, peer)
        set(&s.output.peer_port_name, port)
        set(&s.output.peer_port_type, type)
        set(&s.output.peer_form_factor, formFactor)
        s.cycles = 1
        return s
    }

    /// The same sink, its card's port from headphones to the speaker and back: a `portChanged` event each way naming
    /// the node and the ports, headphones or not from the port (not the node's form factor); the port first learnt
    /// (the card's routes read after the link) is no event.
    @Test func aPortChangeUnderTheSameNodeIsAnEvent() {
        let card = "alsa_output.pci-0000_00_1f.3.analog-stereo"
        var observation = PipeWireObservation()
        observation.begin(with: Self.status(peer: card, port: "", type: "", formFactor: "internal"), at: 0)
        var events = observation.update(
            with: Self.status(peer: card, port: "analog-output-speaker", type: "speaker", formFactor: "internal"), at: 1_000_000, period: 0.005)
        #expect(events.isEmpty, "\(events)")
        events = observation.update(
            with: Self.status(peer: card, port: "analog-output-headphones", type: "headphones", formFactor: "internal"), at: 2_000_000,
            period: 0.005)
        #expect(events.count == 1, "\(events)")
        guard case .routeChanged(let change)? = events.first else { Issue.record("\(events)"); return }
        #expect(change.reason == .portChanged && change.direction == .output)
        #expect(change.from == "\(card):analog-output-speaker" && change.to == "\(card):analog-output-headphones")
        #expect(change.toHeadphones == true)
        events = observation.update(
            with: Self.status(peer: card, port: "analog-output-speaker", type: "speaker", formFactor: "internal"), at: 3_000_000, period: 0.005)
        guard case .routeChanged(let back)? = events.first else { Issue.record("\(events)"); return }
        #expect(back.reason == .portChanged && back.toHeadphones == false, "\(back)")
        // Headphones or not: the port's type first, then its name, then the node's form factor.
        #expect(PipeWireGraph.isHeadphones(Self.status(peer: card, port: "analog-output-headphones", type: "", formFactor: "internal").output) == true)
        #expect(PipeWireGraph.isHeadphones(Self.status(peer: "bt", port: "", type: "", formFactor: "headset").output) == true)
        #expect(PipeWireGraph.isHeadphones(Self.status(peer: "x", port: "", type: "", formFactor: "").output) == nil)
    }
}
