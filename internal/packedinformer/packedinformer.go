// Package packedinformer keeps an informer's objects as their protobuf encoding, compressed,
// rather than as Go structs, and hands out a freshly decoded object on every read and every
// event.
//
// Nearly all of the operator's memory on a large cluster is its informers' copies of the objects
// it makes for each Cache, and most of each copy is not its content but the Go structures that
// hold it: a Secret's struct, its maps of labels and data, a slice for each value and each owner
// reference, each its own allocation rounded up to a size class. Encoded, the same object is one
// slice of bytes without pointers, which the garbage collector need not scan either, and
// compressed, a third smaller again. The objects the operator makes for a Cache with auth and
// TLS (its StatefulSet, Service, budget, four Secrets and CA ConfigMap), cut down as its
// transforms cut them, take 17.1 KiB of an informer's heap as structs and 6.6 KiB packed
// (BenchmarkInformerCopies in the controller's package).
//
// Unpacking costs some tens of microseconds an object, on each read of the cache and each event.
// That suits objects read one at a time by name, as the reconciler reads a Cache's children. It
// does not suit kinds listed in bulk on a hot path: a List through the cache decodes every object
// it looks at (or, with a field index, every object the index gives), so the pods a pass lists
// stay unpacked.
package packedinformer

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"reflect"
	goruntime "runtime"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
)

// Object is a kind whose objects can be packed: a built-in Kubernetes type, which encodes itself
// as protobuf.
type Object interface {
	runtime.Object
	metav1.Object
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// NewInformerFunc makes a shared index informer for the objects of a kind (controller-runtime's
// cache.Options.NewInformer).
type NewInformerFunc func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer

// For is a NewInformerFunc that packs the objects of the kinds given, and makes client-go's usual
// informer for every other kind.
func For(kinds ...Object) NewInformerFunc {
	packs := map[reflect.Type]bool{}
	for _, kind := range kinds {
		packs[reflect.TypeOf(kind)] = true
	}
	return func(lw toolscache.ListerWatcher, example runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		if !packs[reflect.TypeOf(example)] {
			return toolscache.NewSharedIndexInformer(lw, example, resync, indexers)
		}
		return New(lw, example.(Object), resync, indexers)
	}
}

// New is a shared index informer that keeps the objects of example's kind packed. Its store, its
// indexer and its event handlers see them decoded, each time a fresh object of example's type,
// which the caller may keep or change; index functions see them decoded as well, but for those
// given here, which see a packed object with only its namespace, name and resource version,
// enough for client-go's namespace index (toolscache.MetaNamespaceIndexFunc).
func New(lw toolscache.ListerWatcher, example Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	c := codec{typ: reflect.TypeOf(example).Elem()}
	inner := toolscache.NewSharedIndexInformer(lw, example, resync, indexers)
	i := &informer{SharedIndexInformer: inner, codec: c}
	if err := i.SetTransform(nil); err != nil {
		// Only an informer that has started refuses a transform.
		panic(err)
	}
	return i
}

// packed is an object as the informer keeps it: its encoding, compressed, and its length
// before, with what client-go's store and queue key it by and compare (meta.Accessor).
type packed struct {
	namespace, name, resourceVersion string
	compressed                       []byte
	encodedLength                    int
}

func (p *packed) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: p.namespace, Name: p.name, ResourceVersion: p.resourceVersion}
}

func (p *packed) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject is the object itself: a packed object is never changed.
func (p *packed) DeepCopyObject() runtime.Object { return p }

// codec packs and unpacks the objects of one Go type.
type codec struct{ typ reflect.Type }

// pack is obj encoded and compressed; an object packed already, or of another type, is left as
// it is.
func (c codec) pack(obj any) (any, error) {
	o, ok := obj.(Object)
	if !ok || reflect.TypeOf(o).Elem() != c.typ {
		return obj, nil
	}
	encoded, err := o.Marshal()
	if err != nil {
		return nil, fmt.Errorf("packing %s %s/%s: %w", c.typ.Name(), o.GetNamespace(), o.GetName(), err)
	}
	compressed, err := compress(encoded)
	if err != nil {
		return nil, fmt.Errorf("packing %s %s/%s: %w", c.typ.Name(), o.GetNamespace(), o.GetName(), err)
	}
	return &packed{namespace: o.GetNamespace(), name: o.GetName(), resourceVersion: o.GetResourceVersion(),
		compressed: compressed, encodedLength: len(encoded)}, nil
}

// Compression at flate's fastest level takes a further third off (labels, owners and names
// repeat within an object, and PEM is base64) for some tens of microseconds an object. Its
// compressors are kept for reuse, one a core, outside sync.Pool, which a collection empties:
// each holds 1.1 MiB of tables (a decompressor 43 KiB), and making one costs more than the
// compression.
var (
	compressors   = make(chan *flate.Writer, goruntime.GOMAXPROCS(0))
	decompressors = make(chan io.ReadCloser, goruntime.GOMAXPROCS(0))
)

func compress(encoded []byte) ([]byte, error) {
	var w *flate.Writer
	select {
	case w = <-compressors:
	default:
		w, _ = flate.NewWriter(nil, flate.BestSpeed)
	}
	defer reuse(compressors, w)
	var buf bytes.Buffer
	w.Reset(&buf)
	if _, err := w.Write(encoded); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return bytes.Clone(buf.Bytes()), nil
}

func decompress(compressed []byte, length int) ([]byte, error) {
	var r io.ReadCloser
	select {
	case r = <-decompressors:
		if err := r.(flate.Resetter).Reset(bytes.NewReader(compressed), nil); err != nil {
			return nil, err
		}
	default:
		r = flate.NewReader(bytes.NewReader(compressed))
	}
	defer reuse(decompressors, r)
	encoded := make([]byte, length)
	_, err := io.ReadFull(r, encoded)
	return encoded, err
}

// reuse keeps x in kept for the next use, unless kept is full.
func reuse[T any](kept chan T, x T) {
	select {
	case kept <- x:
	default:
	}
}

// unpack is obj decoded, if packed, also inside a tombstone; anything else is left as it is. An
// encoding the informer made itself does not fail to decode; if it did, the object is left packed,
// and whoever reads it fails on its type rather than reading an empty object.
func (c codec) unpack(obj any) any {
	switch o := obj.(type) {
	case *packed:
		encoded, err := decompress(o.compressed, o.encodedLength)
		decoded := reflect.New(c.typ).Interface().(Object)
		if err != nil || decoded.Unmarshal(encoded) != nil {
			return obj
		}
		return decoded
	case toolscache.DeletedFinalStateUnknown:
		o.Obj = c.unpack(o.Obj)
		return o
	}
	return obj
}

func (c codec) unpackAll(objs []any) []any {
	for i := range objs {
		objs[i] = c.unpack(objs[i])
	}
	return objs
}

// informer is a shared index informer whose objects are stored packed.
type informer struct {
	toolscache.SharedIndexInformer
	codec
}

// SetTransform has the informer pack each object after transform has cut it down.
func (i *informer) SetTransform(transform toolscache.TransformFunc) error {
	return i.SharedIndexInformer.SetTransform(func(obj any) (any, error) {
		if _, done := obj.(*packed); done {
			return obj, nil
		}
		if transform != nil {
			var err error
			if obj, err = transform(obj); err != nil {
				return nil, err
			}
		}
		return i.pack(obj)
	})
}

func (i *informer) AddEventHandler(handler toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandler(unpacking{handler, i.codec})
}

func (i *informer) AddEventHandlerWithResyncPeriod(handler toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(unpacking{handler, i.codec}, resync)
}

func (i *informer) AddEventHandlerWithOptions(handler toolscache.ResourceEventHandler, options toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithOptions(unpacking{handler, i.codec}, options)
}

func (i *informer) AddIndexers(indexers toolscache.Indexers) error {
	return i.SharedIndexInformer.AddIndexers(i.unpackingIndexers(indexers))
}

func (i *informer) GetStore() toolscache.Store { return i.GetIndexer() }

func (i *informer) GetIndexer() toolscache.Indexer {
	return indexer{Indexer: i.SharedIndexInformer.GetIndexer(), codec: i.codec}
}

// unpackingIndexers are index functions that see objects decoded.
func (c codec) unpackingIndexers(indexers toolscache.Indexers) toolscache.Indexers {
	unpacking := toolscache.Indexers{}
	for name, index := range indexers {
		unpacking[name] = func(obj any) ([]string, error) { return index(c.unpack(obj)) }
	}
	return unpacking
}

// unpacking is an event handler that is given objects decoded.
type unpacking struct {
	handler toolscache.ResourceEventHandler
	codec
}

func (u unpacking) OnAdd(obj any, isInInitialList bool) {
	u.handler.OnAdd(u.unpack(obj), isInInitialList)
}
func (u unpacking) OnUpdate(oldObj, newObj any) {
	u.handler.OnUpdate(u.unpack(oldObj), u.unpack(newObj))
}
func (u unpacking) OnDelete(obj any) { u.handler.OnDelete(u.unpack(obj)) }

// indexer is the informer's indexer as its readers see it: objects decoded. Writes go to the
// informer's own indexer unchanged, which only the informer makes.
type indexer struct {
	toolscache.Indexer
	codec
}

func (x indexer) List() []any { return x.unpackAll(x.Indexer.List()) }

func (x indexer) Get(obj any) (any, bool, error) {
	item, exists, err := x.Indexer.Get(obj)
	return x.unpack(item), exists, err
}

func (x indexer) GetByKey(key string) (any, bool, error) {
	item, exists, err := x.Indexer.GetByKey(key)
	return x.unpack(item), exists, err
}

func (x indexer) Index(indexName string, obj any) ([]any, error) {
	items, err := x.Indexer.Index(indexName, obj)
	return x.unpackAll(items), err
}

func (x indexer) ByIndex(indexName, indexedValue string) ([]any, error) {
	items, err := x.Indexer.ByIndex(indexName, indexedValue)
	return x.unpackAll(items), err
}

func (x indexer) AddIndexers(indexers toolscache.Indexers) error {
	return x.Indexer.AddIndexers(x.unpackingIndexers(indexers))
}
