(** * Non-vacuity witnesses of the theorems over R ([Real.v]).

    As in [Witnesses.v]: each [W_] proves its theorem's hypotheses at concrete arguments
    (the group [A = (1, -1)], lengths [(1, 2)]) and each [F_] refutes both sides of an
    iff, the left one through the theorem.  Kept apart from [Witnesses.v] (the QArith ones) so
    that a change to the QArith development does not make [exchange proofs] ask
    [Print Assumptions] about these again (each walks the Reals construction). *)

From Coq Require Import Reals Lra Lia.
From Exchange Require Import Real.
Open Scope R_scope.

Definition RA2 (i : nat) : R := match i with O => 1 | S O => -1 | _ => 0 end.
Definition RL12 (i : nat) : R := match i with O => 1 | _ => 2 end.

Lemma RA2_zero_sum : Rsum 2 RA2 = 0.
Proof. simpl. ring. Qed.

(** [hyp_of (T a)] is the hypothesis of a theorem [T : forall x, H x -> C x] at the
    arguments [a], i.e. [H a]: the reviewed record's [W_T := H_T a], as the kernel checks. *)
Definition hyp_of {P C : Prop} (_ : P -> C) : Prop := P.


Lemma RL12_pos : forall i, (i < 2)%nat -> 0 < RL12 i.
Proof. intros [|i] _; simpl; lra. Qed.

(** [/ mean(1/L) = 4/3] for lengths [(1, 2)]. *)
Lemma RL12_harmonic : / Rmean 2 (fun i => / RL12 i) = 4 / 3.
Proof. unfold Rmean. simpl. field. Qed.

Lemma W_R_T1_sufficiency : hyp_of (R_T1_sufficiency 2 RA2 (fun _ => 2) 2).
Proof. red. split; [exact RA2_zero_sum | intros; reflexivity]. Qed.

Lemma W_R_T2_necessity_onehot : hyp_of (R_T2_necessity_onehot 2 (fun _ => 2) (fun _ => 1)).
Proof.
  red. split; [intros; lra |].
  intros j _. apply (R_T1_sufficiency 2 _ _ 2). split; [apply Radv_zero_sum | intros; reflexivity].
Qed.

Lemma W_R_T2_necessity_reals : hyp_of (R_T2_necessity_reals 2 (fun _ => 2) (fun _ => 1)).
Proof.
  red. refine (conj _ (conj _ _)); [lia | intros; lra |].
  intros r _. apply (R_T1_sufficiency 2 _ _ 2). split; [apply Radv_zero_sum | intros; reflexivity].
Qed.

Lemma W_R_T2_necessity_std : hyp_of (R_T2_necessity_std 2 (fun _ => 2)).
Proof.
  red. split; [lia |].
  intros j _. apply (R_T1_sufficiency 2 _ _ 2). split; [apply Radv_zero_sum | intros; reflexivity].
Qed.

Lemma W_R_null_on_equal_rewards : hyp_of (R_null_on_equal_rewards 2 2 (fun _ => 1) RA2 1).
Proof. red. split; [lra | intros; reflexivity]. Qed.

Lemma W_R_T3_one_correct : hyp_of (R_T3_one_correct 2 RL12 1).
Proof. red. lia. Qed.

(** Right to left at the shorter correct response [c = 0]: [1 < 4/3]. *)
Lemma W_R_T3_harmonic_mean : hyp_of (R_T3_harmonic_mean 2 RL12 0).
Proof. red. split; [lia | exact RL12_pos]. Qed.

Lemma W_R_T4_above_event_coefficient : hyp_of (R_T4_above_event_coefficient 2 RA2 (1/5) (1/5) 2).
Proof. red. refine (conj _ (conj _ _)); lra. Qed.

Lemma W_R_T4_above_negative : hyp_of (R_T4_above_negative 2 RA2 (1/5) (1/5) 2).
Proof.
  red. refine (conj _ (conj _ (conj _ _))); try lra.
  exists 1%nat. split; [lia|simpl; lra].
Qed.

Lemma W_R_T4_below_event_coefficient : hyp_of (R_T4_below_event_coefficient 2 RA2 (1/5) (1/5) (1/2)).
Proof. red. refine (conj _ (conj _ _)); lra. Qed.

Lemma W_R_T4_below_positive : hyp_of (R_T4_below_positive 2 RA2 (1/5) (1/5) (1/2)).
Proof.
  red. refine (conj _ (conj _ (conj _ (conj _ _)))); try lra.
  exists O. split; [lia|simpl; lra].
Qed.

Lemma W_R_T4_inside_cancels : hyp_of (R_T4_inside_cancels 2 RA2 (1/5) (1/5) 1).
Proof. red. refine (conj _ (conj _ _)); [lra | lra | exact RA2_zero_sum]. Qed.

(** Right to left: equal GSPO weights (every log-ratio 0, one token) cancel. *)
Lemma W_R_M1_gspo : hyp_of (R_M1_gspo 2 (fun _ => 1%nat) (fun _ _ => 0)).
Proof. red. lia. Qed.

Lemma W_R_M1_gspo_equal_lengths : hyp_of (R_M1_gspo_equal_lengths 2 1%nat (fun _ _ => 0)).
Proof. red. split; lia. Qed.

Lemma W_R_Cor33_hyperplane : hyp_of (R_Cor33_hyperplane 2 RA2).
Proof. red. exists O. split; [lia|simpl; lra]. Qed.

(** ** Iff theorems over R: an input where each side is false *)

Lemma F_R_T3_harmonic_mean :
  ~ (0 < RK 2 (Radv 2 1 (Rind 1)) (fun i => / RL12 i)) /\
  ~ (RL12 1%nat < / Rmean 2 (fun i => / RL12 i)).
Proof.
  assert (HR : ~ (RL12 1%nat < / Rmean 2 (fun i => / RL12 i))).
  { rewrite RL12_harmonic. simpl. lra. }
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (R_T3_harmonic_mean 2 RL12 1 ltac:(split; [lia | exact RL12_pos]))), H.
Qed.

(** Log-ratios all [0] (weights [1]), lengths [1] and [2]: [s_i / L_i] are [1] and [1/2]. *)
Definition NL12 (i : nat) : nat := match i with O => 1%nat | _ => 2%nat end.

Lemma F_R_M1_gspo :
  ~ (forall j, (j < 2)%nat ->
       RK 2 (Radv 2 (Rstd 2 (Rind j)) (Rind j))
            (fun i => gspo_weight (NL12 i) (fun _ => 0) / INR (NL12 i)) = 0) /\
  ~ (forall i j, (i < 2)%nat -> (j < 2)%nat ->
       gspo_weight (NL12 i) (fun _ => 0) / INR (NL12 i) =
       gspo_weight (NL12 j) (fun _ => 0) / INR (NL12 j)).
Proof.
  assert (HR : ~ (forall i j, (i < 2)%nat -> (j < 2)%nat ->
       gspo_weight (NL12 i) (fun _ => 0) / INR (NL12 i) =
       gspo_weight (NL12 j) (fun _ => 0) / INR (NL12 j))).
  { (* GSPO's weight of zero log-ratios is exp 0 = 1. *)
    assert (W1 : forall L, gspo_weight L (fun _ => 0) = 1).
    { intros L. unfold gspo_weight. rewrite (Rsum_zero L (fun _ => 0)) by (intros; reflexivity).
      replace (0 / INR L) with 0 by (unfold Rdiv; ring). apply exp_0. }
    intro H. specialize (H 0%nat 1%nat ltac:(lia) ltac:(lia)). simpl in H.
    rewrite !W1 in H. field_simplify in H; lra. }
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (R_M1_gspo 2 NL12 (fun _ _ => 0) ltac:(lia))), H.
Qed.

(** Equal lengths need unequal weights, [exp h <> exp 0] for some [h]. The standard
    library's monotonicity of [exp] ([exp_increasing], [exp_ineq1]) uses
    [Classical_Prop.classic]; its derivative at 0 ([derivable_pt_lim_exp]) does not:
    [(exp h - 1) / h] is within [1/2] of [1] for small [h <> 0], so [exp h <> 1]. *)
Lemma exp_not_constant : exists h : R, exp h <> 1.
Proof.
  destruct (derivable_pt_lim_exp 0 (1/2) ltac:(lra)) as [d Hd].
  assert (Hpos := cond_pos d).
  exists (d/2). intro E.
  assert (H1 : d/2 <> 0) by lra.
  assert (H2 : Rabs (d/2) < d) by (rewrite Rabs_right; lra).
  specialize (Hd (d/2) H1 H2). rewrite Rplus_0_l, E, exp_0 in Hd.
  replace ((1 - 1) / (d/2) - 1) with (- 1) in Hd by (field; lra).
  rewrite Rabs_left in Hd by lra. lra.
Qed.

(** One token each, log-ratios [0] and [h]: weights [1] and [exp h <> 1]. *)
Definition Rlogh (h : R) (i t : nat) : R := match i with O => 0 | _ => h end.

Lemma F_R_M1_gspo_equal_lengths : exists h : R,
  ~ (forall j, (j < 2)%nat ->
       RK 2 (Radv 2 (Rstd 2 (Rind j)) (Rind j)) (fun i => gspo_weight 1 (Rlogh h i) / INR 1) = 0) /\
  ~ (forall i j, (i < 2)%nat -> (j < 2)%nat -> gspo_weight 1 (Rlogh h i) = gspo_weight 1 (Rlogh h j)).
Proof.
  destruct exp_not_constant as [h Eh]. exists h.
  assert (HR : ~ (forall i j, (i < 2)%nat -> (j < 2)%nat ->
                  gspo_weight 1 (Rlogh h i) = gspo_weight 1 (Rlogh h j))).
  { intro H. specialize (H 0%nat 1%nat ltac:(lia) ltac:(lia)).
    unfold gspo_weight, Rlogh in H. simpl in H.
    replace ((0 + 0) / 1) with 0 in H by field. replace ((0 + h) / 1) with h in H by field.
    rewrite exp_0 in H. apply Eh. symmetry. exact H. }
  split; [|exact HR].
  intro H. apply HR. apply (proj1 (R_M1_gspo_equal_lengths 2 1 (Rlogh h) ltac:(split; lia))), H.
Qed.
