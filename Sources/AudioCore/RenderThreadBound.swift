/// State that a real-time thread owns while it renders, and the control side only while nothing renders.
///
/// The hand-over is ordered by whatever starts and stops the rendering — a driver's thread start and join, the
/// graph's render gate — as swift-nio's `NIOLoopBound` ties a value to its event loop. The type says so where a
/// comment used to, and every access names its side: ``onRenderThread`` inside a cycle, ``whileStopped`` on the
/// control side with nothing rendering. It checks nothing at run time, not even Swift's exclusivity (a check would
/// cost the render thread): the accessors inline to a field access, and never allocate, lock or copy the value.
/// The value may be noncopyable (a kernel that owns its buffers and frees them in its `deinit`).
public final class RenderThreadBound<Value: ~Copyable>: @unchecked Sendable {
    // Unchecked Sendable: the type states a hand-over its owner orders (a thread's start and join, a render gate)
    @usableFromInline @exclusivity(unchecked) var value: Value

    /// Wraps `value`. Make it on the control side, before anything renders with it.
    @inlinable public init(_ value: consuming Value) { self.value = value }

    /// The value, on the render thread, inside a cycle.
    @inlinable public var onRenderThread: Value {
        _read { yield value }
        _modify { yield &value }
    }

    /// The value, on the control side, while nothing renders (before the start, after the stop).
    @inlinable public var whileStopped: Value {
        _read { yield value }
        _modify { yield &value }
    }

    /// The value on a worker thread that owns it the same way, from the thread's start to its join: a file unit's
    /// reader (``whileStopped`` before the reading starts and after it stops), a recorder's writer.
    @inlinable public var onWorkerThread: Value {
        _read { yield value }
        _modify { yield &value }
    }
}
