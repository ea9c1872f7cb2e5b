(** * Non-vacuity witnesses: each theorem applied to concrete arguments.

    A theorem whose hypotheses cannot hold together proves nothing.  For every
    registered theorem with hypotheses, [W_<theorem>] states the theorem's conclusion at
    concrete arguments (a group of 2 or 3 responses, never the empty group) and proves
    it by APPLYING the theorem there, discharging each hypothesis on those arguments.
    So the hypotheses hold at once, and a theorem whose statement changes (a
    contradictory or stronger hypothesis, a different conclusion) no longer proves its
    witness: the build fails.  [exchange proofs] pins every witness in the reviewed
    record and checks, in the term the kernel accepted, that it uses its theorem.

    For an iff theorem, [W_] applies the right-to-left direction (the right side holds,
    so does the left) and [F_] the left-to-right one (contraposed): arguments meeting
    the hypotheses at which both sides are false. *)

From Coq Require Import QArith Lqa Qfield Lia Qminmax.
From Exchange Require Import Sums Cancellation LengthNorm Clipping Restoration.
Open Scope Q_scope.

(** Decides a closed comparison of rationals by computation. *)
Ltac qcomp := vm_compute; first [reflexivity | discriminate | intro; discriminate].

(** The running example, Cor 3.3's zero-sum group [A = (1, 1, -2)]. *)
Lemma cor33_zero_sum : sum 3 cor33_A == 0.
Proof. vm_compute. reflexivity. Qed.

Lemma cor33_nonzero : exists j, (j < 3)%nat /\ ~ cor33_A j == 0.
Proof. exists O. split; [lia|discriminate]. Qed.

(** Lengths [(1, 2)]. *)
Definition L12 (i : nat) : Q := match i with O => 1 | _ => 2 end.

Lemma L12_pos : forall i, (i < 2)%nat -> 0 < L12 i.
Proof. intros [|i] _; reflexivity. Qed.

(** ** T1 *)

Lemma W_T1_sufficiency_exchangeable : sum 3 (fun i => 1 * (2 * cor33_A i * 3)) == 0.
Proof. exact (T1_sufficiency_exchangeable 3 cor33_A 2 3 1 cor33_zero_sum). Qed.

Lemma W_T1_sufficiency : K 3 cor33_A (fun _ => 2) == 0.
Proof. apply (T1_sufficiency 3 cor33_A (fun _ => 2) 2 cor33_zero_sum). intros; reflexivity. Qed.

(** ** T2: equal weights, and the scale 1, meet every hypothesis. *)

Lemma W_T2_necessity_binary :
  forall i j, (i < 3)%nat -> (j < 3)%nat -> (fun _ : nat => 2) i == (fun _ : nat => 2) j.
Proof.
  apply (T2_necessity_binary 3 (fun _ => 2) (fun _ => 1)).
  - intros. reflexivity.
  - intros r _. apply (T1_sufficiency 3 _ _ 2); [apply adv_zero_sum | intros; reflexivity].
Qed.

Lemma W_T2_necessity_zero_sum :
  forall i j, (i < 3)%nat -> (j < 3)%nat -> (fun _ : nat => 2) i == (fun _ : nat => 2) j.
Proof.
  apply (T2_necessity_zero_sum 3 (fun _ => 2)).
  intros A HZ. apply (T1_sufficiency 3 A _ 2 HZ). intros; reflexivity.
Qed.

(** Right to left: equal weights cancel every zero-sum advantage vector. *)
Lemma W_T2_characterisation : forall A, sum 2 A == 0 -> K 2 A (fun _ => 2) == 0.
Proof. apply (proj2 (T2_characterisation 2 (fun _ => 2))). intros; reflexivity. Qed.

(** ** M1, M4, M6, equal rewards *)

(** Right to left: equal weights [s1 = s2 = 2] cancel. *)
Lemma W_M1_two_responses : K 2 (pair 1 (- 1)) (pair 2 2) == 0.
Proof. apply (proj2 (M1_two_responses 1 2 2 ltac:(discriminate))). reflexivity. Qed.

Lemma W_M4_nonzero_sum_breaks : ~ K 2 (pair 1 0) (fun _ => 2) == 0.
Proof.
  apply (M4_nonzero_sum_breaks 2 (pair 1 0) 2); [discriminate | vm_compute; discriminate].
Qed.

Lemma W_M6_additive_term : sum 3 (fun i => cor33_A i * 2 + 1) == QG 3 * 1.
Proof. exact (M6_additive_term 3 cor33_A 2 1 cor33_zero_sum). Qed.

Lemma W_M6_does_not_vanish : ~ sum 3 (fun i => cor33_A i * 2 + 1) == 0.
Proof.
  apply (M6_does_not_vanish 3 cor33_A 2 1); [lia | discriminate | exact cor33_zero_sum].
Qed.

Lemma W_null_on_equal_rewards :
  forall i, (i < 3)%nat -> adv 3 2 (fun _ => 1) i * cor33_w i == 0.
Proof. apply (null_on_equal_rewards 3 2 (fun _ => 1) cor33_w 1). intros; reflexivity. Qed.

(** ** (E) and OPO *)

(** Right to left: the product form [kappa i e = A_i * e] (events [e : Q]) is (E). *)
Lemma W_E_product_form : exchangeable 3 cor33_A (fun i (e : Q) => cor33_A i * e).
Proof.
  apply (proj2 (E_product_form Q 3 cor33_A (fun i e => cor33_A i * e))).
  exists (fun e => e). intros; reflexivity.
Qed.

Lemma W_M4_opo_sum :
  sum 2 (opo_adv 2 L12 (pair 1 0)) * sum 2 L12 ==
  - QG 2 * sum 2 (fun i => (L12 i - mean 2 L12) * (pair 1 0 i - mean 2 (pair 1 0))).
Proof. apply (M4_opo_sum 2 L12 (pair 1 0)). vm_compute. discriminate. Qed.

Lemma W_M4_opo_equal_lengths : sum 3 (opo_adv 3 (fun _ => 2) (ind 0)) == 0.
Proof.
  apply (M4_opo_equal_lengths 3 (fun _ => 2) (ind 0) 2); [lia | discriminate | intros; reflexivity].
Qed.

(** ** T3: lengths [(1, 2)]. *)

Lemma W_T3_one_correct :
  K 2 (adv 2 1 (ind 1)) (fun i => / L12 i) == / L12 1%nat - mean 2 (fun i => / L12 i).
Proof. exact (T3_one_correct 2 L12 1 ltac:(lia)). Qed.

(** Right to left at the shorter correct response [c = 0]. *)
Lemma W_T3_sign : 0 < K 2 (adv 2 1 (ind 0)) (fun i => / L12 i).
Proof. apply (proj2 (T3_sign 2 L12 0 ltac:(lia))). reflexivity. Qed.

Lemma W_T3_harmonic_mean : 0 < K 2 (adv 2 1 (ind 0)) (fun i => / L12 i).
Proof. apply (proj2 (T3_harmonic_mean 2 L12 0 ltac:(lia) L12_pos)). reflexivity. Qed.

(** ** T4: [eps = 0.2]; [rho = 2] above and [rho = 1/2] below the trust region, [rho = 1]
    inside; the dual clip [c = 3], [rho = 4] above it. *)

Lemma W_T4_above_event_coefficient :
  sum 3 (fun i => clip_coef (1#5) (1#5) 2 (cor33_A i)) == 2 * sum 3 (fun i => neg_part (cor33_A i)).
Proof. apply T4_above_event_coefficient; qcomp. Qed.

Lemma W_T4_above_negative : sum 3 (fun i => clip_coef (1#5) (1#5) 2 (cor33_A i)) < 0.
Proof.
  apply T4_above_negative; try qcomp. exists 2%nat. split; [lia|reflexivity].
Qed.

Lemma W_T4_below_event_coefficient :
  sum 3 (fun i => clip_coef (1#5) (1#5) (1#2) (cor33_A i)) ==
  (1#2) * sum 3 (fun i => pos_part (cor33_A i)).
Proof. apply T4_below_event_coefficient; qcomp. Qed.

Lemma W_T4_below_positive : 0 < sum 3 (fun i => clip_coef (1#5) (1#5) (1#2) (cor33_A i)).
Proof.
  apply T4_below_positive; try qcomp. exists O. split; [lia|reflexivity].
Qed.

Lemma W_T4_inside_cancels : sum 3 (fun i => clip_coef (1#5) (1#5) 1 (cor33_A i)) == 0.
Proof. apply T4_inside_cancels; [qcomp | qcomp | exact cor33_zero_sum]. Qed.

Lemma W_T4_dual_agrees_up_to_c :
  dual_clip_coef 3 (1#5) (1#5) 2 (-1) == clip_coef (1#5) (1#5) 2 (-1).
Proof. apply T4_dual_agrees_up_to_c. qcomp. Qed.

Lemma W_T4_dual_above_negative :
  sum 3 (fun i => dual_clip_coef 3 (1#5) (1#5) 2 (cor33_A i)) < 0.
Proof.
  apply T4_dual_above_negative; try qcomp.
  exists 2%nat. split; [lia|reflexivity].
Qed.

Lemma W_T4_dual_above_c :
  forall i, (i < 3)%nat -> dual_clip_coef 3 (1#5) (1#5) 4 (cor33_A i) == 0.
Proof. apply T4_dual_above_c; qcomp. Qed.

(** ** T5 on Cor 3.3's group, weights [(1, 3, 2)] or [(1, 2, 2)] *)

Lemma W_T5_min_replace : K 3 cor33_A (fun _ => gmin 3 cor33_w) == 0.
Proof. exact (T5_min_replace 3 cor33_A cor33_w cor33_zero_sum). Qed.

Lemma W_T5_constant_normaliser : K 3 cor33_A (fun _ => / 7) == 0.
Proof. exact (T5_constant_normaliser 3 cor33_A 7 cor33_zero_sum). Qed.

Lemma W_T5_adv_orthogonal : K 3 cor33_A (orth 3 cor33_A (pair 1 2)) == 0.
Proof. exact (T5_adv_orthogonal 3 cor33_A (pair 1 2) cor33_nonzero). Qed.

Lemma W_T5_adv_orthogonal_projection :
  K 3 cor33_A (orth 3 cor33_A (pair 1 2)) == 0 /\
  exists t, forall i, pair 1 2 i - orth 3 cor33_A (pair 1 2) i == t * cor33_A i.
Proof. exact (T5_adv_orthogonal_projection 3 cor33_A (pair 1 2) cor33_nonzero). Qed.

Lemma W_T5_sign_free_weight : K 3 cor33_A (fun _ => (fun x => x * x) 2) == 0.
Proof. exact (T5_sign_free_weight 3 cor33_A (fun x => x * x) 2 cor33_zero_sum). Qed.

Lemma W_T5_truncated_ratio : K 3 cor33_A (fun _ => Qmin 2 (1 + (1#5))) == 0.
Proof. exact (T5_truncated_ratio 3 cor33_A 2 (1#5) cor33_zero_sum). Qed.

Lemma W_T5_min_replace_general :
  (forall i j, (i < 3)%nat -> (j < 3)%nat -> min_replace 3 cor33_w i == min_replace 3 cor33_w j) /\
  (forall i j, (i < 3)%nat -> (j < 3)%nat -> min_replace 3 cor33_w i <= cor33_w j) /\
  (exists k, (k < 3)%nat /\ forall i, min_replace 3 cor33_w i == cor33_w k) /\
  (forall A, sum 3 A == 0 -> K 3 A (min_replace 3 cor33_w) == 0).
Proof. exact (T5_min_replace_general 3 cor33_w ltac:(lia)). Qed.

Lemma W_T5_event_clip :
  sum 3 (fun i => if qltb 1 2 then 0 else cor33_A i * (fun x => x) 2) == 0.
Proof. exact (T5_event_clip 3 cor33_A (qltb 1) (fun x => x) 2 cor33_zero_sum). Qed.

(** ** Iff theorems: an input where each side is false (the left side refuted through
    the theorem's left-to-right direction). *)

Lemma F_T2_characterisation :
  ~ (forall A, sum 2 A == 0 -> K 2 A (pair 1 2) == 0) /\
  ~ (forall i j, (i < 2)%nat -> (j < 2)%nat -> pair 1 2 i == pair 1 2 j).
Proof.
  assert (HR : ~ (forall i j, (i < 2)%nat -> (j < 2)%nat -> pair 1 2 i == pair 1 2 j)).
  { intro H. specialize (H 0%nat 1%nat ltac:(lia) ltac:(lia)). vm_compute in H. discriminate. }
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (T2_characterisation 2 (pair 1 2))), H.
Qed.

Lemma F_T3_sign :
  ~ (0 < K 2 (adv 2 1 (ind 1)) (fun i => / L12 i)) /\
  ~ (mean 2 (fun i => / L12 i) < / L12 1%nat).
Proof.
  assert (HR : ~ (mean 2 (fun i => / L12 i) < / L12 1%nat)) by (vm_compute; discriminate).
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (T3_sign 2 L12 1 ltac:(lia))), H.
Qed.

Lemma F_T3_harmonic_mean :
  ~ (0 < K 2 (adv 2 1 (ind 1)) (fun i => / L12 i)) /\
  ~ (L12 1%nat < / mean 2 (fun i => / L12 i)).
Proof.
  assert (HR : ~ (L12 1%nat < / mean 2 (fun i => / L12 i))) by (vm_compute; discriminate).
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (T3_harmonic_mean 2 L12 1 ltac:(lia) L12_pos)), H.
Qed.

Lemma F_M1_two_responses :
  ~ (K 2 (pair 1 (- 1)) (pair 1 2) == 0) /\ ~ (1 == 2).
Proof.
  assert (HR : ~ (1 == 2)) by discriminate.
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (M1_two_responses 1 1 2 ltac:(discriminate))), H.
Qed.

(** (E) fails for [kappa i e = cor33_w i * e] (unequal weights) and no product form
    exists: the coefficients at [e = 1] are [(1, 3, -4)]... refuted through the theorem. *)
Lemma F_E_product_form :
  ~ exchangeable 3 cor33_A (fun i (e : Q) => cor33_w i * e) /\
  ~ (exists h : Q -> Q, forall e i, (i < 3)%nat -> cor33_w i * e == cor33_A i * h e).
Proof.
  assert (HR : ~ (exists h : Q -> Q, forall e i, (i < 3)%nat -> cor33_w i * e == cor33_A i * h e)).
  { intros [h Hh]. assert (H0 := Hh 1 0%nat ltac:(lia)). assert (H1 := Hh 1 1%nat ltac:(lia)).
    simpl in H0, H1. rewrite <- H1 in H0. discriminate H0. }
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (E_product_form Q 3 cor33_A _)), H.
Qed.
