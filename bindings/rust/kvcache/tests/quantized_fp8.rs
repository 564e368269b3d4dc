//! FP8 quantized layers (ABI 0.4, `KVC_LAYER_QUANTIZED_FP8`): transformers'
//! `Fp8QuantizedLayer`. One float32 scale per tensor, amax / 448, fixed by
//! the first update, which returns its inputs as they are; later updates
//! return the whole history as `dtype(e4m3fn(x / scale) * scale)`.

mod common;

use common::{Host, assert_kind_raw, custom, e4m3fn};
use kvcache::{LayerKind, LayerOptions};

const DIM: i64 = 4;

/// `[1, 1, tokens, DIM]` holding `values` (tokens * DIM of them).
fn host(values: &[f32]) -> Host {
    Host {
        data: values.to_vec(),
        shape: vec![1, 1, values.len() as i64 / DIM, DIM],
    }
}

/// What the layer stores for `xs` under the scale calibrated on `first`.
fn round_trip(first: &[f32], xs: &[f32]) -> Vec<f32> {
    let amax = first.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = (amax / 448.0).max(f32::MIN_POSITIVE);
    xs.iter().map(|&x| e4m3fn(x / scale) * scale).collect()
}

#[test]
fn reference_rounds_to_nearest_even() {
    assert_eq!(e4m3fn(448.0), 448.0);
    assert_eq!(e4m3fn(450.0), 448.0);
    assert_eq!(e4m3fn(1.0625), 1.0); // halfway between 1.0 and 1.125: the even code
    assert_eq!(e4m3fn(1.1875), 1.25); // halfway between 1.125 and 1.25: the even code
    assert_eq!(e4m3fn(3.3), 3.25);
    assert_eq!(e4m3fn(-0.3), -0.3125);
    assert_eq!(e4m3fn(2f32.powi(-9)), 2f32.powi(-9)); // the smallest subnormal
}

#[test]
fn kind_round_trips_through_raw() {
    assert_kind_raw(LayerKind::QuantizedFp8, 14);
}

#[test]
fn fp8_layers_return_inputs_then_the_dequantized_history() {
    let mut cache = custom([LayerOptions::quantized_fp8(), LayerOptions::quantized_fp8()]);
    assert_eq!(cache.num_layers(), 2);
    for layer in 0..2 {
        assert_eq!(
            cache.layer_info(layer as u32).unwrap().kind,
            LayerKind::QuantizedFp8
        );
    }

    // Layer 0: amax 448, so scale 1.0 and e4m3fn values come back unchanged.
    // Layer 1: amax 10, a scale of 10/448 (its later keys are divided by 50
    // to stay in range).
    let first_keys = [
        [448.0, 1.0, 1.0625, 0.5, -2.0, 1.1875, 3.3, -0.3],
        [10.0, 1.0, 1.0625, 0.5, -2.0, 1.1875, 3.3, -0.3],
    ];
    let first_values = [
        [-448.0, 0.25, 7.0, 96.0, 1.0625, 0.0, 5.5, 2.5],
        [-10.0, 0.25, 7.0, 9.0, 1.0625, 0.0, 5.5, 2.5],
    ];
    let second_keys = [1.0625, 100.0, 200.0, -3.3];
    let second_values = [6.5, -0.1, 0.0078125, 1.1875];

    for layer in 0..2 {
        let (k, v) = (host(&first_keys[layer]), host(&first_values[layer]));
        let out = cache.update(layer as u32, &k.t(), &v.t()).unwrap();
        // The first update returns its inputs as they are (1.0625, 1.1875 and 3.3 included).
        assert_eq!(out.key.shape(), &[1, 1, 2, DIM]);
        assert_eq!(out.key.to_vec::<f32>().unwrap(), first_keys[layer]);
        assert_eq!(out.value.to_vec::<f32>().unwrap(), first_values[layer]);
    }

    for layer in 0..2 {
        let second_keys: Vec<f32> = second_keys
            .iter()
            .map(|x| x / (1 + 49 * layer) as f32)
            .collect();
        let (k, v) = (host(&second_keys), host(&second_values));
        let out = cache.update(layer as u32, &k.t(), &v.t()).unwrap();
        assert_eq!(out.key.shape(), &[1, 1, 3, DIM]);
        let history_keys: Vec<f32> = first_keys[layer]
            .iter()
            .chain(&second_keys)
            .copied()
            .collect();
        let history_values: Vec<f32> = first_values[layer]
            .iter()
            .chain(&second_values)
            .copied()
            .collect();
        let want_keys = round_trip(&first_keys[layer], &history_keys);
        let want_values = round_trip(&first_values[layer], &history_values);
        assert_eq!(
            out.key.to_vec::<f32>().unwrap(),
            want_keys,
            "keys of layer {layer}"
        );
        assert_eq!(
            out.value.to_vec::<f32>().unwrap(),
            want_values,
            "values of layer {layer}"
        );
        if layer == 0 {
            // Scale 1.0: the rounding is visible as it is.
            assert_eq!(
                want_keys,
                [
                    448.0, 1.0, 1.0, 0.5, -2.0, 1.25, 3.25, -0.3125, 1.0, 96.0, 192.0, -3.25
                ]
            );
        }
    }
    assert_eq!(cache.layer_info(1).unwrap().seq_length, 3);
}
