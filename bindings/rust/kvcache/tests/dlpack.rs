//! DLPack exchange (feature `dlpack`).

mod common;

#[cfg(not(feature = "dlpack"))]
#[test]
fn dlpack_tests_need_the_feature() {
    common::say(
        "SKIPPED: dlpack tests: build with `--features dlpack` (or `--all-features`) to run them",
    );
}

#[cfg(feature = "dlpack")]
mod with_feature {
    use super::common::{Host, positions};
    use kvcache::dlpack::{
        DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY,
        DLPACK_MAJOR_VERSION,
    };
    use kvcache::{Cache, ErrorCode, TensorRef};

    #[test]
    fn zero_copy_export_points_into_the_cache() {
        let mut cache = Cache::new().unwrap();
        cache.reserve(8).unwrap();
        let x = Host::tokens(1, 2, 0, 3, 4);
        let kv = cache.update(0, &x.t(), &x.t()).unwrap();
        let exported = kv.key.to_dlpack().unwrap();
        let managed = exported.managed();
        assert_eq!(managed.version.major, DLPACK_MAJOR_VERSION);
        assert_eq!(managed.flags, DLPACK_FLAG_BITMASK_READ_ONLY);
        let t = &managed.dl_tensor;
        assert_eq!(t.data.cast_const(), kv.key.data_ptr());
        assert_eq!(t.byte_offset, kv.key.byte_offset());
        assert_eq!((t.device.device_type, t.device.device_id), (1, 0));
        assert_eq!((t.dtype.code, t.dtype.bits, t.dtype.lanes), (2, 32, 1));
        // SAFETY: ndim entries owned by the export.
        let (shape, strides) = unsafe {
            (
                std::slice::from_raw_parts(t.shape, 4).to_vec(),
                std::slice::from_raw_parts(t.strides, 4).to_vec(),
            )
        };
        assert_eq!(shape, [1, 2, 3, 4]);
        assert_eq!(strides, kv.key.strides().into_owned());
        // Feeding the export back in reads the same elements.
        let mut other = Cache::new().unwrap();
        let copy = other
            .update(0, &exported.as_input(), &exported.as_input())
            .unwrap();
        assert_eq!(positions(&copy.key, 0, 1), [0, 1, 2]);
    }

    #[test]
    fn copies_own_their_data() {
        let mut cache = Cache::new().unwrap();
        cache.reserve(8).unwrap();
        let x = Host::tokens(2, 1, 0, 2, 3);
        let kv = cache.update(0, &x.t(), &x.t()).unwrap();
        let copy = kv.value.to_dlpack_copy().unwrap();
        drop(cache);
        let managed = copy.managed();
        assert_eq!(managed.flags, DLPACK_FLAG_BITMASK_IS_COPIED);
        let t = &managed.dl_tensor;
        // SAFETY: ndim entries owned by the copy.
        let strides = unsafe { std::slice::from_raw_parts(t.strides, 4) };
        assert_eq!(strides, [6, 6, 3, 1]); // compact
        // SAFETY: the copy owns its data for as long as `copy` lives.
        let input = unsafe { TensorRef::from_dlpack(t) }.unwrap();
        let mut again = Cache::new().unwrap();
        let kv = again.update(0, &input, &input).unwrap();
        assert_eq!(kv.key.to_vec::<f32>().unwrap(), x.data);
    }

    #[test]
    fn a_consumer_calls_the_deleter() {
        let mut cache = Cache::new().unwrap();
        let x = Host::tokens(1, 1, 0, 1, 2);
        let kv = cache.update(0, &x.t(), &x.t()).unwrap();
        let raw: *mut DLManagedTensorVersioned = kv.key.to_dlpack_copy().unwrap().into_raw();
        // SAFETY: a live managed tensor whose deleter we call once, as a consumer does.
        unsafe {
            let versioned = TensorRef::from_dlpack_versioned(&*raw).unwrap();
            assert_eq!(versioned.shape(), &[1, 1, 1, 2]);
            ((*raw).deleter.unwrap())(raw);
        }
    }

    #[test]
    fn bad_dlpack_inputs_are_refused() {
        use kvcache::dlpack::{DLDataType, DLDevice, DLPackVersion, DLTensor};
        let mut shape = [1i64; 7];
        let t = DLTensor {
            data: std::ptr::null_mut(),
            device: DLDevice {
                device_type: 1,
                device_id: 0,
            },
            ndim: 7,
            dtype: DLDataType {
                code: 2,
                bits: 32,
                lanes: 1,
            },
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        // SAFETY: refused before anything is read.
        let err = unsafe { TensorRef::from_dlpack(&t) }.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        let managed = DLManagedTensorVersioned {
            version: DLPackVersion { major: 2, minor: 0 },
            manager_ctx: std::ptr::null_mut(),
            deleter: None,
            flags: 0,
            dl_tensor: DLTensor { ndim: 1, ..t },
        };
        // SAFETY: refused before anything is read.
        let err = unsafe { TensorRef::from_dlpack_versioned(&managed) }.unwrap_err();
        assert!(err.message().contains("major version"), "{err}");
    }
}
