import AudioCore
import AudioGraph

/// A session's graph built as a list of named parts: each part is a unit, the parts that feed its input buses (by
/// name, in bus order), and whether it is a sink — rendered every cycle though it leads nowhere (a recorder, an
/// encoder's tap, a meter). Adding a part to a session is one entry; a part that cannot be added names itself.
struct GraphParts {
    let graph: RenderGraph
    private(set) var nodes: [String: NodeID]

    /// - Parameter known: parts that are already in `graph` (a voice chain's microphone and last node), by name.
    init(_ graph: RenderGraph, known: [String: NodeID] = [:]) {
        self.graph = graph
        nodes = known
    }

    /// Adds part `name`: `unit`, fed by the parts `inputs` (input bus 0, 1, …; nil leaves a bus unconnected).
    /// - Throws: ``AudioError`` from the graph, its message prefixed with the part ("part 'monitor' (mixer): …"),
    ///   or `.invalidNode` for an input that names no part.
    mutating func add(_ name: String, _ unit: RenderUnit, from inputs: [String?] = [], sink: Bool = false) throws(AudioError) {
        do throws(AudioError) {
            let node = try graph.addNode(unit, name: name)
            nodes[name] = node
            for (bus, source) in inputs.enumerated() {
                guard let source else { continue }
                guard let from = nodes[source] else { throw AudioError(.invalidNode, "no part '\(source)' feeds input \(bus)") }
                try graph.connect(from, to: node, inputBus: bus)
            }
            if sink { try graph.addSink(node) }
        } catch {
            throw AudioError(error.code, "part '\(name)' (\(unit.kind)): \(error.message)")
        }
    }

    /// Connects part `name` to the graph's output.
    func output(from name: String) throws(AudioError) {
        guard let node = nodes[name] else { throw AudioError(.invalidNode, "no part '\(name)' feeds the output") }
        try graph.connect(node, to: graph.output)
    }

    subscript(name: String) -> NodeID? { nodes[name] }
}
