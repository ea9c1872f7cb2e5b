(** * Non-vacuity witnesses: each theorem's hypotheses hold at concrete arguments.

    A theorem whose hypotheses cannot hold together proves nothing.  Every registered
    theorem with hypotheses is stated as [forall x, H x -> C x], its hypotheses one
    conjunction, as in the reviewed record ([proofs/spec/Spec.v]: [H_T], [C_T]), and
    [W_<theorem>] proves [H] at concrete arguments (a group of 2 or 3 responses,
    advantages of both signs): [hyp_of (T a)] is [H a], which the kernel checks against
    the record's [W_T := H_T a].  So the hypotheses hold at once, however [W_] is
    proved, and a re-pin that made them contradictory would make [W_] unprovable.

    For an iff theorem without hypotheses, [W_] applies the right-to-left direction (the
    right side holds, so does the left); for every iff theorem [F_] applies the
    left-to-right one (contraposed): arguments meeting the hypotheses at which both sides
    are false. *)

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

(** [hyp_of (T a)] is the hypothesis of a theorem [T : forall x, H x -> C x] at the
    arguments [a], i.e. [H a]: the reviewed record's [W_T := H_T a], as the kernel checks. *)
Definition hyp_of {P C : Prop} (_ : P -> C) : Prop := P.


(** ** T1 *)

Lemma W_T1_sufficiency_exchangeable : hyp_of (T1_sufficiency_exchangeable 3 cor33_A 2 3 1).
Proof. exact cor33_zero_sum. Qed.

Lemma W_T1_sufficiency : hyp_of (T1_sufficiency 3 cor33_A (fun _ => 2) 2).
Proof. red. split; [exact cor33_zero_sum | intros; reflexivity]. Qed.

(** ** T2: equal weights, and the scale 1, meet every hypothesis. *)

Lemma W_T2_necessity_binary : hyp_of (T2_necessity_binary 3 (fun _ => 2) (fun _ => 1)).
Proof.
  red. split.
  - intros; reflexivity.
  - intros r _. apply (T1_sufficiency 3 _ _ 2). split; [apply adv_zero_sum | intros; reflexivity].
Qed.

Lemma W_T2_necessity_zero_sum : hyp_of (T2_necessity_zero_sum 3 (fun _ => 2)).
Proof. red. intros A HZ. apply (T1_sufficiency 3 A _ 2). split; [exact HZ | intros; reflexivity]. Qed.

(** Right to left: equal weights cancel every zero-sum advantage vector. *)
Lemma W_T2_characterisation : forall A, sum 2 A == 0 -> K 2 A (fun _ => 2) == 0.
Proof. apply (proj2 (T2_characterisation 2 (fun _ => 2))). intros; reflexivity. Qed.

(** ** M1, M4, M6, equal rewards *)

(** Right to left: equal weights [s1 = s2 = 2] cancel. *)
Lemma W_M1_two_responses : hyp_of (M1_two_responses 1 2 2).
Proof. red. discriminate. Qed.

Lemma W_M4_nonzero_sum_breaks : hyp_of (M4_nonzero_sum_breaks 2 (pair 2 (- 1)) 2).
Proof. red. split; [discriminate | vm_compute; discriminate]. Qed.

Lemma W_M6_additive_term : hyp_of (M6_additive_term 3 cor33_A 2 1).
Proof. exact cor33_zero_sum. Qed.

Lemma W_M6_does_not_vanish : hyp_of (M6_does_not_vanish 3 cor33_A 2 1).
Proof. red. refine (conj _ (conj _ _)); [lia | discriminate | exact cor33_zero_sum]. Qed.

Lemma W_null_on_equal_rewards : hyp_of (null_on_equal_rewards 3 2 (fun _ => 1) cor33_w 1).
Proof. red. intros; reflexivity. Qed.

(** ** (E) and OPO *)

(** Right to left: the product form [kappa i e = A_i * e] (events [e : Q]) is (E). *)
Lemma W_E_product_form : exchangeable 3 cor33_A (fun i (e : Q) => cor33_A i * e).
Proof.
  apply (proj2 (E_product_form Q 3 cor33_A (fun i e => cor33_A i * e))).
  exists (fun e => e). intros; reflexivity.
Qed.

Lemma W_M4_opo_sum : hyp_of (M4_opo_sum 2 L12 (pair 1 0)).
Proof. red. vm_compute. discriminate. Qed.

Lemma W_M4_opo_equal_lengths : hyp_of (M4_opo_equal_lengths 3 (fun _ => 2) (ind 0) 2).
Proof. red. refine (conj _ (conj _ _)); [lia | discriminate | intros; reflexivity]. Qed.

(** ** T3: lengths [(1, 2)]. *)

Lemma W_T3_one_correct : hyp_of (T3_one_correct 2 L12 1).
Proof. red. lia. Qed.

(** Right to left at the shorter correct response [c = 0]. *)
Lemma W_T3_sign : hyp_of (T3_sign 2 L12 0).
Proof. red. lia. Qed.

Lemma W_T3_harmonic_mean : hyp_of (T3_harmonic_mean 2 L12 0).
Proof. red. split; [lia | exact L12_pos]. Qed.

(** ** T4: [eps = 0.2]; [rho = 2] above and [rho = 1/2] below the trust region, [rho = 1]
    inside; the dual clip [c = 3], [rho = 4] above it. *)

Lemma W_T4_above_event_coefficient : hyp_of (T4_above_event_coefficient 3 cor33_A (1#5) (1#5) 2).
Proof. red. refine (conj _ (conj _ _)); qcomp. Qed.

Lemma W_T4_above_negative : hyp_of (T4_above_negative 3 cor33_A (1#5) (1#5) 2).
Proof.
  red. refine (conj _ (conj _ (conj _ _))); try qcomp.
  exists 2%nat. split; [lia|reflexivity].
Qed.

Lemma W_T4_below_event_coefficient : hyp_of (T4_below_event_coefficient 3 cor33_A (1#5) (1#5) (1#2)).
Proof. red. refine (conj _ (conj _ _)); qcomp. Qed.

Lemma W_T4_below_positive : hyp_of (T4_below_positive 3 cor33_A (1#5) (1#5) (1#2)).
Proof.
  red. refine (conj _ (conj _ (conj _ (conj _ _)))); try qcomp.
  exists O. split; [lia|reflexivity].
Qed.

Lemma W_T4_inside_cancels : hyp_of (T4_inside_cancels 3 cor33_A (1#5) (1#5) 1).
Proof. red. refine (conj _ (conj _ _)); [qcomp | qcomp | exact cor33_zero_sum]. Qed.

Lemma W_T4_dual_agrees_up_to_c : hyp_of (T4_dual_agrees_up_to_c 3 (1#5) (1#5) 2 (-1)).
Proof. red. qcomp. Qed.

Lemma W_T4_dual_above_negative : hyp_of (T4_dual_above_negative 3 cor33_A 3 (1#5) (1#5) 2).
Proof.
  red. refine (conj _ (conj _ (conj _ (conj _ _)))); try qcomp.
  exists 2%nat. split; [lia|reflexivity].
Qed.

Lemma W_T4_dual_above_c : hyp_of (T4_dual_above_c 3 cor33_A 3 (1#5) (1#5) 4).
Proof. red. split; qcomp. Qed.

(** ** T5 on Cor 3.3's group, weights [(1, 3, 2)] or [(1, 2, 2)] *)

Lemma W_T5_min_replace : hyp_of (T5_min_replace 3 cor33_A cor33_w).
Proof. exact cor33_zero_sum. Qed.

Lemma W_T5_constant_normaliser : hyp_of (T5_constant_normaliser 3 cor33_A 7).
Proof. exact cor33_zero_sum. Qed.

Lemma W_T5_adv_orthogonal : hyp_of (T5_adv_orthogonal 3 cor33_A (pair 1 2)).
Proof. exact cor33_nonzero. Qed.

Lemma W_T5_adv_orthogonal_projection : hyp_of (T5_adv_orthogonal_projection 3 cor33_A (pair 1 2)).
Proof. exact cor33_nonzero. Qed.

Lemma W_T5_sign_free_weight : hyp_of (T5_sign_free_weight 3 cor33_A (fun x => x * x) 2).
Proof. exact cor33_zero_sum. Qed.

Lemma W_T5_truncated_ratio : hyp_of (T5_truncated_ratio 3 cor33_A 2 (1#5)).
Proof. exact cor33_zero_sum. Qed.

Lemma W_T5_min_replace_general : hyp_of (T5_min_replace_general 3 cor33_w).
Proof. red. lia. Qed.

Lemma W_T5_event_clip : hyp_of (T5_event_clip 3 cor33_A (qltb 1) (fun x => x) 2).
Proof. exact cor33_zero_sum. Qed.

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
  intro H. apply HR. apply (proj1 (T3_harmonic_mean 2 L12 1 ltac:(split; [lia | exact L12_pos]))), H.
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
